"""One report folder from a grid's cells: report.md (paper-style tables, plots embedded), report.json
(the data behind every table), the PNG plots, and on request README_snippet.md.

Built from the files in <report>/runs/, so a rebuild (--report-only) gives the same report. A cell whose
run folder is gone (runs/ is not committed) keeps the result an earlier report.json holds for the same
cell id, as it is: reports written before intervals and load existed show those as n/a.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .cells import Cell, cell_command
from .grid import Grid
from .plots import speedup_plot, sweep_plot
from .runs import cell_dir, cell_result
from .tables import (BUSY, FAMILY_NAMES, PARAM_NAMES, ablation_markdown, cells_markdown, quality_markdown,
                     speedup_markdown, sweep_markdown, tables, tokens_markdown)

TABLE_STYLE = {"we": "Table 2 style", "cd": "Tables 3, 4 style"}


def earlier_results(out: Path) -> dict[str, dict]:
    """Cell id -> the finished cells of the report.json already in out (none: {})."""
    path = out / "report.json"
    if not path.is_file():
        return {}
    try:
        cells = json.loads(path.read_text(encoding="utf-8")).get("cells", [])
    except (json.JSONDecodeError, AttributeError):
        return {}
    return {r["id"]: r for r in cells if isinstance(r, dict) and r.get("status") == "done" and "id" in r}


def _result(cell: Cell, grid: Grid, out: Path, earlier: dict[str, dict]) -> dict:
    """The cell's result from its run folder; a cell never run there keeps its earlier report.json result."""
    result = {**cell_result(cell, out), "command": cell_command(cell, grid, cell_dir(out, cell))}
    if result["status"] == "todo" and not result["prompts"] and cell.id in earlier:
        return {**earlier[cell.id], "main": cell.main, "sweeps": cell.sweeps}
    return result


def report_data(grid: Grid, cells: list[Cell], out: Path, command: str, grid_file: str) -> dict:
    earlier = earlier_results(out)
    results = [_result(c, grid, out, earlier) for c in cells]
    return {"name": grid.name, "grid": grid_file, "description": grid.description, "command": command,
            "cells": results, "tables": tables(results, grid), "plots": {}}


def draw(data: dict, grid: Grid, out: Path) -> None:
    """The PNGs of every table or sweep that has at least one result; their names go into data['plots']."""
    caption = f"{data['grid']} · {data['command']}"
    for fam, rows in data["tables"]["speedup"].items():
        if any(c for r in rows for c in r["cells"].values()):
            speedup_plot(rows, list(grid.datasets), fam, caption, out / f"speedup_{fam}.png")
            data["plots"][f"speedup_{fam}"] = f"speedup_{fam}.png"
    for param, series in data["tables"]["sweeps"].items():
        if any(p["measured_speedup"] is not None for s in series for p in s["points"]):
            sweep_plot(series, param, caption, out / f"{param}_sweep.png")
            data["plots"][f"{param}_sweep"] = f"{param}_sweep.png"


def _figure(data: dict, key: str, what: str, prefix: str = "") -> list[str]:
    if key not in data["plots"]:
        return []
    return ["", f"![{what}]({prefix}{data['plots'][key]})", "",
            f"*{what}; grid `{data['grid']}`, command `{data['command']}`.*"]


def markdown(data: dict, grid: Grid) -> str:
    results, t = data["cells"], data["tables"]
    done = sum(r["status"] == "done" for r in results)
    gammas = sorted({g for p in grid.pairs.values() for g in p.gammas})
    lines = [f"# Reproduction report: {data['name']}", "",
             f"Produced by `{data['command']}` from `{data['grid']}`.", ""]
    lines += [data["description"].strip(), ""] if data["description"].strip() else []
    lines += [f"{done}/{len(results)} cells have results. Speedups are over each method's standard counterpart "
              f"(we, cd), measured side by side on the same prompts in the same process (compare_with=standard); "
              f"α = acceptance rate; pred = the speedup docs/algorithm.md §6 predicts from the measured α and cost "
              f"ratio c; γ = the proposer's proposal length (every other member 1) that gave the best measured "
              f"speedup, of {gammas}. SD = Naive-CoS (a fixed proposer verified against r), as in the paper. "
              f"WE: λ = {grid.lam:g} (two members); CD: μ (method.alpha) = {grid.alpha:g}. "
              f"[low, high]: the paired bootstrap 95% interval of the speedup over prompts ([n/a]: no per-prompt "
              f"data); {BUSY.strip()}: measured while other processes kept the machine busy, after the retries."]
    for fam, rows in t["speedup"].items():
        lines += ["", f"## {FAMILY_NAMES[fam]} speedups ({TABLE_STYLE[fam]})", "", *speedup_markdown(rows, grid, fam)]
        lines += _figure(data, f"speedup_{fam}", f"{FAMILY_NAMES[fam]} speedups")
    lines += ["", "## Raw tokens/s (Tables 5, 6 style): standard → SD (Naive-CoS) → CoS", "",
              "Standard: the baseline measured side by side in the CoS cell of that column."]
    for fam, rows in t["tokens_per_second"].items():
        lines += ["", f"### {FAMILY_NAMES[fam]}", "", *tokens_markdown(rows, grid, fam)]
    if any(t["ablation"].values()):
        lines += ["", "## Ablation (Tables 7, 8 style): Naive-CoS vs CoS", "",
                  "Both at the γ that was best for CoS: what alternate proposals add over a fixed proposer."]
    for fam, rows in t["ablation"].items():
        lines += ["", f"### {FAMILY_NAMES[fam]}", "", *ablation_markdown(rows, grid, fam)] if rows else []
    if t["sweeps"]:
        lines += ["", "## Sweeps"]
    for param, series in t["sweeps"].items():
        lines += ["", f"### {PARAM_NAMES[param]} sweep", "", *sweep_markdown(series, param)]
        lines += _figure(data, f"{param}_sweep", f"{PARAM_NAMES[param]} sweep")
    lines += ["", "## Quality: standard vs accelerated", "",
              "Per main cell, on the same prompts: the metric with its 95% interval (Wilson for pass@1 / accuracy, "
              "bootstrap for ROUGE), and at T = 0 how many prompts' outputs were token-identical to the standard "
              "method's; at each prompt that differs, the gap log r(standard's token) - log r(the method's token) "
              "at the first differing position, under the standard method's r from a fresh forward over the whole "
              "prefix in the members' dtype: near 0 is a floating-point tie (the block and one-token forwards "
              "round differently), whole nats would be a bug.", "", *quality_markdown(results)]
    lines += ["", "## Every cell", "",
              "Folders: `runs/<cell>/` (results.jsonl, config.yaml, summary.json, loads.jsonl). Machine: the load "
              "average before → after the kept measurement and the cores other processes used meanwhile.", "",
              *cells_markdown(results)]
    missing = [r for r in results if r["status"] != "done"]
    if missing:
        lines += ["", "## Cells without results", "", "Rerun the command to run or resume them.", ""]
        lines += [f"- `{r['id']}`: {r['status']}" + (f" ({r['note']})" if r["note"] else "") for r in missing]
    return "\n".join(lines) + "\n"


def write_report(grid: Grid, cells: list[Cell], out: Path, command: str, grid_file: str) -> dict:
    """report.md, report.json and the plots in out; returns report.json's data."""
    out.mkdir(parents=True, exist_ok=True)
    data = report_data(grid, cells, out, command, grid_file)
    draw(data, grid, out)
    (out / "report.json").write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (out / "report.md").write_text(markdown(data, grid), encoding="utf-8")
    return data


def readme_snippet(data: dict, grid: Grid, out: Path, root: Path) -> str:
    """The speedup tables and one plot, with links relative to the repository root (for README.md)."""
    prefix = Path(os.path.relpath(out.resolve(), root.resolve())).as_posix() + "/"
    lines = [f"Reproduction grid `{data['grid']}`: `{data['command']}` (full report: [{prefix}report.md]"
             f"({prefix}report.md)). Speedup measured side by side over the standard method (α acceptance rate, "
             f"pred the §6 prediction, γ the best proposal length)."]
    for fam, rows in data["tables"]["speedup"].items():
        lines += ["", f"**{FAMILY_NAMES[fam]}**", "", *speedup_markdown(rows, grid, fam, reference=False)]
    for fam in [f for f in ("cd", "we") if f"speedup_{f}" in data["plots"]][:1]:  # one plot: CD when there is one
        lines += _figure(data, f"speedup_{fam}", f"{FAMILY_NAMES[fam]} speedups", prefix)
    return "\n".join(lines) + "\n"


def readme_markers(name: str) -> tuple[str, str]:
    """The comments that fence a grid's generated results section in README.md."""
    return f"<!-- reproduce:{name} -->", f"<!-- /reproduce:{name} -->"


def update_readme(readme: Path, name: str, snippet: str) -> bool:
    """Replace what README.md holds between the grid's markers with the snippet; False when it has none."""
    text = readme.read_text(encoding="utf-8") if readme.is_file() else ""
    start, end = readme_markers(name)
    if start not in text or end not in text.split(start, 1)[1]:
        return False
    head, rest = text.split(start, 1)
    readme.write_text(f"{head}{start}\n{snippet}{end}{rest.split(end, 1)[1]}", encoding="utf-8")
    return True

