"""What a run leaves in its output folder, and resuming from it.

    config.yaml     the resolved configuration (written before the first prompt)
    results.jsonl   one line per finished prompt, appended and flushed as each prompt finishes
    summary.json    quality, speed and acceptance over the selected prompts (summary.py)

A folder that already holds results.jsonl is resumed: prompts whose id is present are not redone.
Resuming is refused when a setting that changes outputs differs from the saved config.yaml
(dataset.size may grow: selections are prefixes of one seeded shuffle, so tiny ⊂ small ⊂ full),
including `data_sha256`, a digest of every row of the data (run.py adds it), so another file with
the same ids, or the same file edited, is refused too. config.yaml is replaced atomically.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

import yaml

RESULTS, SUMMARY, CONFIG = "results.jsonl", "summary.json", "config.yaml"
# Settings that change what a prompt's record holds: resuming with another value would mix runs.
FINGERPRINT = ("dataset.name", "dataset.path", "dataset.use_fewshot", "dataset.chat_template", "dataset.options",
               "data_sha256", "method", "seed", "max_prompt_len", "device", "dtype", "compare_with", "backend")
# Compared only when both sides know it: folders written before it existed, and callers that have not
# read the data (report/runs.py), still compare on everything else.
KNOWN_ONLY_WHEN_READ = ("data_sha256",)
# Keys added after folders were written: a folder without one ran with this value.
DEFAULTS = {"backend": "hf"}


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
    a, b = {**DEFAULTS, **_flatten(old)}, {**DEFAULTS, **_flatten(new)}
    changed = []
    for key in sorted(set(a) | set(b)):
        if key in KNOWN_ONLY_WHEN_READ and (key not in a or key not in b):
            continue
        if any(key == k or key.startswith(k + ".") for k in keys) and a.get(key) != b.get(key):
            changed.append(f"{key}: {a.get(key)!r} -> {b.get(key)!r}")
    return changed


def prepare_output(out_dir: Path, cfg: Mapping) -> list[dict]:
    """Create the folder, refuse to mix configurations, save the config; returns finished records."""
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"save_path {out_dir} is a file, not a folder: give a new folder, or one holding "
                         f"a run to resume")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ValueError(f"cannot create the output folder {out_dir} ({e.strerror}): choose another "
                         f"save_path") from None
    records = read_records(out_dir / RESULTS)
    saved = out_dir / CONFIG
    if records:
        if not saved.is_file():
            raise ValueError(f"{out_dir} holds {RESULTS} but no {CONFIG}, so its configuration can't be "
                             f"checked: use a new save_path, or restore {CONFIG} to resume")
        changed = differences(read_config(saved), cfg)
        if changed:
            raise ValueError(f"{out_dir} holds results of another configuration ({'; '.join(changed)}): "
                             f"use a new save_path, or set these back to resume")
    write_atomically(saved, yaml.safe_dump(dict(cfg), sort_keys=False, allow_unicode=True))
    return records


def read_config(path: Path) -> Mapping:
    """A saved config.yaml; one that is cut short or not a mapping is a one-line error."""
    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        problem = " ".join(str(e).split())
        raise ValueError(f"{path} is not valid YAML (cut short or edited? {problem}): restore it, or use a new "
                         f"save_path") from None
    if not isinstance(loaded, Mapping) or "method" not in loaded:
        raise ValueError(f"{path} does not hold a run configuration (cut short or edited?): restore it, or use "
                         f"a new save_path")
    return loaded


def write_atomically(path: Path, text: str) -> None:
    """Write a sibling temp file, flush it to disk, then rename over `path`: never a half-written file."""
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_summary(out_dir: Path, summary: dict) -> Path:
    path = out_dir / SUMMARY
    write_atomically(path, json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
    return path
