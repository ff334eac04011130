"""The summaries of a sweep (or of any runs) as one markdown table: `python scripts/reproduce.py collect`.

    python main_dataset.py -m method=cd,cd_sd,cd_chef dataset.name=humaneval,gsm8k save_path=multirun/cd ...
    python scripts/reproduce.py collect multirun/cd [more folders] [--out table.md]

Every folder below the given ones that holds a summary.json is one row (its config.yaml adds the
models and gamma). Folders with results.jsonl but no summary.json (running, interrupted or failed)
are listed under the table. Reads files only: no torch, no models.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

COLUMNS = ["run", "dataset", "method", "models", "gamma", "T", "prompts", "quality", "tok/s", "tok/s (mean)",
           "acc. rate", "mean acc. len", "predicted speedup", "measured speedup", "greedy identical"]


def _num(value, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _run_name(folder: Path, root: Path) -> str:
    """The run's folder as given on the command line plus its place in the sweep."""
    rel = folder.relative_to(root)
    return root.name if rel == Path(".") else f"{root.name}/{rel}"


def row(summary_path: Path, root: Path) -> list[str]:
    s = json.loads(summary_path.read_text(encoding="utf-8"))
    config_path = summary_path.parent / "config.yaml"
    cfg = yaml.safe_load(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}
    method = cfg.get("method", {}) if isinstance(cfg, dict) else {}
    gamma = s.get("gamma") if "gamma" in s else method.get("gamma")
    compare = s.get("compare_with") or {}
    identical = f"{compare['identical']}/{compare['greedy_compared']}" if compare.get("greedy_compared") else "-"
    measured = f"{_num(s.get('measured_speedup'))} vs {compare['method']}" if compare else "-"
    quality = ", ".join(f"{k} {_num(v)}" for k, v in (s.get("quality") or {}).items()) or "-"
    prompts = f"{s.get('prompts')}/{s.get('selected')}" + ("" if s.get("complete") else " (incomplete)")
    return [
        _run_name(summary_path.parent, root), str(s.get("dataset")), str(s.get("method")),
        " + ".join(str(m) for m in s.get("models") or []), "-" if gamma is None else str(gamma).replace(" ", ""), _num(s.get("temperature"), 1),
        prompts, quality, _num(s.get("tokens_per_second"), 2), _num(s.get("tokens_per_second_mean"), 2),
        _num(s.get("acceptance_rate")), _num(s.get("mean_acceptance_length")), _num(s.get("predicted_speedup")),
        measured, identical,
    ]


def collect(roots: list[Path]) -> str:
    """The markdown table (and a list of runs without a summary) for every run below `roots`."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    unfinished = []
    for root in roots:
        if not root.is_dir():
            raise ValueError(f"{root} is not a folder")
        for summary in sorted(root.rglob("summary.json")):
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in row(summary, root)) + " |")
        unfinished += [p.parent for p in sorted(root.rglob("results.jsonl")) if not (p.parent / "summary.json").is_file()]
    if len(lines) == 2:
        raise ValueError(f"no summary.json below {', '.join(map(str, roots))}")
    if unfinished:
        lines += ["", "Without a summary (running, interrupted or failed; rerun with save_path=<folder> to resume):"]
        lines += [f"- {p}" for p in unfinished]
    return "\n".join(lines) + "\n"
