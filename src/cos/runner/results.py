"""What a run leaves in its output folder, and resuming from it.

    config.yaml     the resolved configuration (written before the first prompt)
    results.jsonl   one line per finished prompt, appended and flushed as each prompt finishes
    summary.json    quality, speed and acceptance over the selected prompts (summary.py)

A folder that already holds results.jsonl is resumed: prompts whose id is present are not redone.
Resuming is refused when a setting that changes outputs differs from the saved config.yaml
(dataset.size may grow: selections are prefixes of one seeded shuffle, so tiny ⊂ small ⊂ full).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

import yaml

RESULTS, SUMMARY, CONFIG = "results.jsonl", "summary.json", "config.yaml"
# Settings that change what a prompt's record holds: resuming with another value would mix runs.
FINGERPRINT = ("dataset.name", "dataset.use_fewshot", "dataset.chat_template", "dataset.options", "method",
               "seed", "max_prompt_len", "dtype", "compare_with")


def read_records(path: Path) -> list[dict]:
    """Records of finished prompts. A last line cut short by an interruption is removed from the file."""
    if not path.is_file():
        return []
    data = path.read_bytes()
    records, kept = [], 0
    lines = data.splitlines(keepends=True)
    for n, line in enumerate(lines, start=1):
        try:
            record = json.loads(line) if line.endswith(b"\n") else None
        except json.JSONDecodeError:
            record = None
        if record is None:
            if n < len(lines):
                raise ValueError(f"line {n} of {path} is not a complete JSON record: remove it to resume")
            break  # the tail of an interrupted write
        records.append(record)
        kept += len(line)
    if kept < len(data):
        with path.open("r+b") as f:
            f.truncate(kept)
    return records


class ResultsWriter:
    """Appends one JSON line per prompt and flushes it to disk at once (a crash loses no finished prompt)."""

    def __init__(self, path: Path) -> None:
        self._file = path.open("a", encoding="utf-8")

    def append(self, record: dict) -> None:
        self._file.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> ResultsWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _flatten(d, prefix: str = "") -> dict:
    if not isinstance(d, Mapping):
        return {prefix.rstrip("."): d}
    out: dict = {}
    for k, v in d.items():
        out.update(_flatten(v, f"{prefix}{k}."))
    return out


def differences(old: Mapping, new: Mapping, keys=FINGERPRINT) -> list[str]:
    """'key: old -> new' for every fingerprint setting that differs."""
    a, b = _flatten(old), _flatten(new)
    changed = []
    for key in sorted(set(a) | set(b)):
        if any(key == k or key.startswith(k + ".") for k in keys) and a.get(key) != b.get(key):
            changed.append(f"{key}: {a.get(key)!r} -> {b.get(key)!r}")
    return changed


def prepare_output(out_dir: Path, cfg: Mapping) -> list[dict]:
    """Create the folder, refuse to mix configurations, save the config; returns finished records."""
    out_dir.mkdir(parents=True, exist_ok=True)
    records = read_records(out_dir / RESULTS)
    saved = out_dir / CONFIG
    if records and saved.is_file():
        changed = differences(yaml.safe_load(saved.read_text(encoding="utf-8")) or {}, cfg)
        if changed:
            raise ValueError(f"{out_dir} holds results of another configuration ({'; '.join(changed)}): "
                             f"use a new save_path, or set these back to resume")
    saved.write_text(yaml.safe_dump(dict(cfg), sort_keys=False, allow_unicode=True), encoding="utf-8")
    return records


def write_summary(out_dir: Path, summary: dict) -> Path:
    path = out_dir / SUMMARY
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path
