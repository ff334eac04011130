"""Run the cells of a grid into <report>/runs/<cell-id>/, resumably, and read back what they left.

A cell whose summary.json says complete, for the same configuration, is skipped without loading a
model; a cell with a partial results.jsonl resumes (the runner's own resume). A failing cell is
reported on one line and the others go on: no finished cell or prompt is lost.

Load: the runner records how busy the machine was while the cell ran (machine.LoadMeter, summary.json
`load`). A cell measured while other processes kept the machine busy is run again from scratch, at most
`busy_retries` times; its busy results are kept aside as results.busy<k>.jsonl, every attempt's load is
appended to loads.jsonl, and the last measurement is kept (flagged busy in the report if it still was).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from ..runner.cli import USER_ERRORS
from ..runner.greedy_gap import fill_gaps
from ..runner.results import CONFIG, RESULTS, SUMMARY, differences, read_records
from ..runner.run import run_dataset
from .cells import Cell
from .intervals import cell_intervals

RUNS = "runs"
LOADS = "loads.jsonl"  # one line per attempt at a cell: {"attempt", "load"}
BUSY_RETRIES = 2
# summary.json keys copied into each cell's result (report.json), as they are
SUMMARY_FIELDS = ("prompts", "selected", "measured_speedup", "acceptance_rate", "predicted_speedup",
                  "measured_over_predicted", "cost_ratio", "mean_acceptance_length", "tokens_per_second",
                  "tokens_per_second_mean", "quality")


@dataclass
class State:
    status: str  # done | partial | todo | stale
    prompts: int  # finished prompts in results.jsonl
    note: str = ""


def cell_dir(out: Path, cell: Cell) -> Path:
    return out / RUNS / cell.id


def _read(path: Path, parse: Callable):
    return parse(path.read_text(encoding="utf-8")) if path.is_file() else None


def cell_state(folder: Path, cfg: dict) -> State:
    """What a cell's folder holds, for configuration cfg. Reads files only; changes nothing."""
    results = folder / RESULTS
    prompts = sum(1 for line in results.read_bytes().splitlines(keepends=True) if line.endswith(b"\n")) \
        if results.is_file() else 0
    saved = _read(folder / CONFIG, yaml.safe_load) or {}
    changed = differences(saved, cfg) if saved else []
    if changed and prompts:
        return State("stale", prompts, f"{folder} holds results of another configuration ({'; '.join(changed)}): "
                                       f"delete the folder to rerun this cell")
    summary = _read(folder / SUMMARY, json.loads)
    same_size = saved.get("dataset", {}).get("size") == cfg["dataset"]["size"]
    if summary and summary.get("complete") and same_size and not changed:
        return State("done", prompts)
    return State("partial" if prompts else "todo", prompts)


def one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return text if isinstance(error, USER_ERRORS) else f"{type(error).__name__}: {text}"


def measure(cell: Cell, folder: Path, loaded: dict, retries: int, echo: Callable[[str], None], head: str) -> None:
    """Run the cell; while its summary says the machine was busy and retries are left, set the busy
    results aside (results.busy<k>.jsonl) and run it again. Every attempt's load goes to loads.jsonl."""
    attempt = len(_loads(folder))
    while True:
        attempt += 1
        summary = run_dataset(cell.config, folder, loaded=loaded)
        load = summary.get("load")
        with (folder / LOADS).open("a", encoding="utf-8") as f:
            f.write(json.dumps({"attempt": attempt, "load": load}) + "\n")
        if not (load and load.get("busy")) or retries <= 0:
            return
        retries -= 1
        aside = folder / f"results.busy{attempt}.jsonl"
        (folder / SUMMARY).unlink()  # first: a folder with a summary but no results would read as done
        os.replace(folder / RESULTS, aside)
        echo(f"{head}: machine busy (other processes used {load.get('others_cores') or 0:.1f} of {load['cores']} "
             f"cores; results kept as {aside.name}): running it again")


def run_cells(cells: list[Cell], out: Path, echo: Callable[[str], None] = print,
              busy_retries: int = BUSY_RETRIES) -> list[tuple[str, str]]:
    """Run every cell not yet done, in order; returns (cell id, one-line error) of the cells that failed."""
    failures = []
    loaded: dict = {}  # models, loaded once for every cell of this process
    for k, cell in enumerate(cells, start=1):
        head, folder = f"cell {k}/{len(cells)}: {cell.id}", cell_dir(out, cell)
        state = cell_state(folder, cell.config)
        if state.status == "done":
            echo(f"{head} (skipped)")
            continue
        if state.status != "stale":
            echo(f"{head} (running" + (f", resuming after {state.prompts} prompts)" if state.prompts else ")"))
        start = time.perf_counter()
        try:
            if state.status == "stale":  # the runner would refuse too; say how to rerun it
                raise ValueError(state.note)
            measure(cell, folder, loaded, busy_retries, echo, head)
        except KeyboardInterrupt:
            raise
        except Exception as e:  # noqa: BLE001 (one cell's failure must not stop the others)
            if os.environ.get("COS_TRACEBACK"):
                raise
            failures.append((cell.id, one_line(e)))
            echo(f"{head} FAILED: {failures[-1][1]}")
            continue
        echo(f"{head} (done in {time.perf_counter() - start:.0f}s)")
    return failures


def fill_cell_gaps(cells: list[Cell], out: Path, echo: Callable[[str], None] = print) -> None:
    """The log r gap at every greedy difference of the finished cells that lack one (cells run before
    the runner recorded it); loads models only for a cell that needs them."""
    loaded: dict = {}
    for cell in cells:
        folder = cell_dir(out, cell)
        if cell_state(folder, cell.config).status != "done":
            continue
        try:
            added = fill_gaps(folder, loaded)
        except USER_ERRORS as e:  # the cell's results stand; its report shows '?' for the gap
            echo(f"{cell.id}: log r gap not computed ({one_line(e)})")
            continue
        if added:
            echo(f"{cell.id}: log r gap added at {added} greedy difference(s)")


def _loads(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (_read(folder / LOADS, str.splitlines) or []) if line.strip()]


def load_fields(summary: dict | None, folder: Path) -> dict:
    """How loaded the machine was while the kept measurement ran, and how many attempts it took."""
    load = (summary or {}).get("load") or {}
    return {"load": load or None, "busy": load.get("busy") if load else None,
            "attempts": len(_loads(folder)) or None}


def cell_result(cell: Cell, out: Path) -> dict:
    """The cell's settings and, when it is done, its summary's numbers (the data behind every table)."""
    folder = cell_dir(out, cell)
    state = cell_state(folder, cell.config)
    result = {"id": cell.id, "pair": cell.pair, "dataset": cell.dataset, "method": cell.method,
              "family": cell.family, "temperature": cell.temperature, "gamma": cell.gamma, "lambda": cell.lam,
              "alpha": cell.alpha, "main": cell.main, "sweeps": cell.sweeps, "status": state.status,
              "note": state.note, "folder": str(folder.relative_to(out))}
    summary = _read(folder / SUMMARY, json.loads) if state.status == "done" else None
    result.update({k: (summary or {}).get(k) for k in SUMMARY_FIELDS})
    compare = (summary or {}).get("compare_with") or {}
    result.update({"standard_method": compare.get("method"),
                   "standard_tokens_per_second": compare.get("tokens_per_second"),
                   "standard_quality": compare.get("quality"), "identical": compare.get("identical"),
                   "greedy_compared": compare.get("greedy_compared")})
    result.update(load_fields(summary, folder))
    records = read_records(folder / RESULTS) if summary is not None else []
    result.update(cell_intervals(records) if summary is not None else
                  {"speedup_interval": None, "quality_interval": None, "standard_quality_interval": None})
    result["greedy_gaps"] = [r.get("log_r_gap") for r in records if r.get("identical") is False]
    if summary is None:
        result["prompts"] = state.prompts
    return result
