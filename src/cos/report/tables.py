"""Cell results -> the paper's tables: their data (report.json) and their markdown (report.md).

Speedups (Tables 2-4): rows pair × T × method, columns datasets; per (pair, dataset, method, T) the
best γ of the main grid, as the paper reports (the cell names its γ). Raw tokens/s (Tables 5, 6):
standard -> Naive-CoS -> CoS; the standard is the baseline measured side by side in the CoS cell.
Ablation (Tables 7, 8): Naive-CoS at the γ that was best for CoS, vs CoS. Published values sit in a
row below ours when the pair's `paper_pair` names the paper's pair; otherwise in a separate
reference table under a note.
"""

from __future__ import annotations

from ..runner.config import family
from .grid import Grid
from .paper import ABLATION, DATASETS, FIGURES, ROLE_NAMES, ROLES, SPEEDUP, TOKENS_PER_SECOND, published

FAMILY_NAMES = {"we": "Weighted ensemble (WE)", "cd": "Contrastive decoding (CD)"}
NAIVE_COS = {"naive": ROLE_NAMES["naive"], "cos": ROLE_NAMES["cos"]}
PARAM_NAMES = {"lambda": "λ", "alpha": "μ (method.alpha)", "gamma": "γ"}
DASH = "–"


# --- data -------------------------------------------------------------------------------------------
def _best(results: list[dict], pair: str, dataset: str, method: str, t: float, gamma: int | None = None) -> dict | None:
    """The main-grid cell with the highest measured speedup (or the one with this γ)."""
    found = [r for r in results if r["main"] and r["measured_speedup"] is not None and r["pair"] == pair
             and r["dataset"] == dataset and r["method"] == method and r["temperature"] == t
             and gamma in (None, r["gamma"])]
    return max(found, key=lambda r: r["measured_speedup"], default=None)


def _point(r: dict | None) -> dict | None:
    keys = ("id", "gamma", "measured_speedup", "acceptance_rate", "predicted_speedup")
    extra = ("speedup_interval", "busy")  # absent from reports written before they existed
    return None if r is None else {**{k: r[k] for k in keys}, **{k: r.get(k) for k in extra}}


def _paper(grid: Grid, values: dict | None) -> dict | None:
    """Published {paper dataset: value} -> {grid dataset key: value} for the grid's datasets."""
    if values is None:
        return None
    return {key: values[d.name] for key, d in grid.datasets.items() if d.name in values}


def _published_roles(grid: Grid, table: dict, fam: str, paper: str | None, t: float, roles) -> dict | None:
    """{role: {grid dataset key: value}} of one published row; None when the paper has no such row."""
    if (fam, paper, t) not in table:
        return None
    return {role: _paper(grid, published(table, fam, paper, t, role)) for role in roles}


def _rows(grid: Grid, fam: str):
    """(pair, T, the pair's methods of this family that run at T, paper pair name) in grid order."""
    for pair in grid.pairs.values():
        methods = [m for m in pair.methods if family(m) == fam]
        for t in dict.fromkeys(t for m in methods for t in grid.temperatures_of(m)):
            yield pair, t, [m for m in methods if t in grid.temperatures_of(m)], pair.paper_pair.get(fam)


def speedup_table(results: list[dict], grid: Grid, fam: str) -> list[dict]:
    return [{"pair": pair.name, "temperature": t, "method": m, "role": ROLES[m], "paper_pair": paper,
             "cells": {d: _point(_best(results, pair.name, d, m, t)) for d in grid.datasets},
             "paper": _paper(grid, published(SPEEDUP, fam, paper, t, ROLES[m]))}
            for pair, t, methods, paper in _rows(grid, fam) for m in methods]


def tokens_table(results: list[dict], grid: Grid, fam: str) -> list[dict]:
    rows = []
    for pair, t, methods, paper in _rows(grid, fam):
        cells = {}
        for d in grid.datasets:
            best = {ROLES[m]: _best(results, pair.name, d, m, t) for m in methods}
            base = best.get("cos") or best.get("naive")
            cells[d] = None if base is None else {
                "standard": base["standard_tokens_per_second"], "standard_from": base["id"],
                **{role: r and r["tokens_per_second"] for role, r in best.items()},
                **{f"{role}_id": r and r["id"] for role, r in best.items()}}
        rows.append({"pair": pair.name, "temperature": t, "paper_pair": paper, "cells": cells,
                     "paper": _published_roles(grid, TOKENS_PER_SECOND, fam, paper, t, ("standard", "naive", "cos"))})
    return rows


def ablation_table(results: list[dict], grid: Grid, fam: str) -> list[dict]:
    rows = []
    for pair, t, methods, paper in _rows(grid, fam):
        by_role = {ROLES[m]: m for m in methods}
        if not {"naive", "cos"} <= set(by_role):
            continue
        naive, cos = by_role["naive"], by_role["cos"]
        cells = {}
        for d in grid.datasets:
            best = _best(results, pair.name, d, cos, t)
            same = best and _best(results, pair.name, d, naive, t, gamma=best["gamma"])
            cells[d] = best and {"gamma": best["gamma"], "cos": best["measured_speedup"], "cos_id": best["id"],
                                 "naive": same and same["measured_speedup"], "naive_id": same and same["id"]}
        rows.append({"pair": pair.name, "temperature": t, "paper_pair": paper, "cells": cells,
                     "paper": _published_roles(grid, ABLATION, fam, paper, t, ("naive", "cos"))})
    return rows


def sweep_table(results: list[dict], param: str) -> list[dict]:
    """One series per (pair, dataset, method, T) of a sweep: its points in order of the swept value."""
    series: dict[tuple, list] = {}
    for r in results:
        if param in r["sweeps"]:
            series.setdefault((r["pair"], r["dataset"], r["method"], r["temperature"]), []).append(r)
    return [{"pair": p, "dataset": d, "method": m, "temperature": t,
             "points": [{"value": r[param], **_point(r)} for r in sorted(rs, key=lambda r: r[param])]}
            for (p, d, m, t), rs in series.items()]


def tables(results: list[dict], grid: Grid) -> dict:
    """Everything report.md shows, as data."""
    fams = [f for f in FAMILY_NAMES if any(r["family"] == f for r in results)]
    return {"speedup": {f: speedup_table(results, grid, f) for f in fams},
            "tokens_per_second": {f: tokens_table(results, grid, f) for f in fams},
            "ablation": {f: ablation_table(results, grid, f) for f in fams},
            "sweeps": {s.param: sweep_table(results, s.param) for s in grid.sweeps}}


# --- markdown ---------------------------------------------------------------------------------------
def num(value, digits: int = 2) -> str:
    return DASH if value is None else f"{value:.{digits}f}"


def rate(value) -> str:
    """.81 (the paper's style for α); 1.00 stays 1.00."""
    return DASH if value is None else f"{value:.2f}".replace("0.", ".", 1) if value < 1 else f"{value:.2f}"


def interval(bounds, digits: int = 2) -> str:
    """'[1.30, 1.55]', or '[n/a]' where no per-prompt data gave one (reports older than intervals)."""
    return "[n/a]" if not bounds else f"[{num(bounds[0], digits)}, {num(bounds[1], digits)}]"


BUSY = " ⚠busy"  # measured while other processes kept the machine busy (after the retries)


def speedup_text(p: dict | None, with_gamma: bool = True) -> str:
    """'1.42 [1.30, 1.55] (α .81, pred 1.55, γ5)': measured side by side with its paired bootstrap 95%
    interval over prompts, acceptance rate, ALGORITHM §6 prediction; ' ⚠busy' if measured on a busy machine."""
    if p is None:
        return DASH
    gamma = f", γ{p['gamma']}" if with_gamma else ""
    return (f"{num(p['measured_speedup'])} {interval(p.get('speedup_interval'))} (α {rate(p['acceptance_rate'])}, "
            f"pred {num(p['predicted_speedup'])}{gamma})" + (BUSY if p.get("busy") else ""))


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows)]


def _unmatched_note(rows: list[dict], fam: str, table: dict, role_names: dict, digits: int = 2,
                    reference: bool = True) -> list[str]:
    """A note under a table for pairs with no published counterpart; when none has one, the paper's rows
    follow in a separate reference table (reference=False: a pointer to the full report instead)."""
    missing = sorted({r["pair"] for r in rows if r["paper_pair"] is None})
    if not missing:
        return []
    note = f"No published {fam.upper()} pair matches {', '.join(missing)} (`paper_pair` unset)"
    if any(r["paper_pair"] for r in rows) or not reference:
        return ["", note + ("." if reference else "; the paper's values are in the full report.")]
    ref = [[pair, f"{t:g}", role_names[role], *(num(values.get(d), digits) for d in DATASETS)]
           for (f, pair, t), roles in table.items() if f == fam for role, values in roles.items() if role in role_names]
    return ["", note + ": the paper's values below are on other models and hardware, for reference only.", "",
            *_table(["paper pair", "T", "method", *DATASETS], ref)]


def speedup_markdown(rows: list[dict], grid: Grid, fam: str, reference: bool = True) -> list[str]:
    out = []
    for r in rows:
        label = f"{ROLE_NAMES[r['role']]} `{r['method']}`"
        out.append([r["pair"], f"{r['temperature']:g}", label, *(speedup_text(r["cells"][d]) for d in grid.datasets)])
        if r["paper"] is not None:
            out.append([f"↳ paper: {r['paper_pair']}", f"{r['temperature']:g}", ROLE_NAMES[r["role"]],
                        *(num(r["paper"].get(d)) for d in grid.datasets)])
    note = _unmatched_note(rows, fam, SPEEDUP, NAIVE_COS, reference=reference)
    return _table(["pair", "T", "method", *grid.datasets], out) + note


def tokens_markdown(rows: list[dict], grid: Grid, fam: str) -> list[str]:
    arrow = lambda c, keys: DASH if c is None or all(c.get(k) is None for k in keys) else " → ".join(
        num(c.get(k), 1) for k in keys)
    roles = ("standard", "naive", "cos")
    out = []
    for r in rows:
        out.append([r["pair"], f"{r['temperature']:g}", *(arrow(r["cells"][d], roles) for d in grid.datasets)])
        if r["paper"] is not None:
            per_dataset = {d: {role: (r["paper"][role] or {}).get(d) for role in roles} for d in grid.datasets}
            out.append([f"↳ paper: {r['paper_pair']}", f"{r['temperature']:g}",
                        *(arrow(per_dataset[d], roles) for d in grid.datasets)])
    names = {"standard": ROLE_NAMES["standard"], **NAIVE_COS}
    return _table(["pair", "T", *grid.datasets], out) + _unmatched_note(rows, fam, TOKENS_PER_SECOND, names, 1)


def ablation_markdown(rows: list[dict], grid: Grid, fam: str) -> list[str]:
    def text(naive, cos, gamma=None) -> str:
        if naive is None and cos is None:
            return DASH
        return f"{num(naive)} vs {num(cos)}" + ("" if gamma is None else f" (γ{gamma})")

    out = []
    for r in rows:
        c = {d: r["cells"][d] or {} for d in grid.datasets}
        out.append([r["pair"], f"{r['temperature']:g}",
                    *(text(c[d].get("naive"), c[d].get("cos"), c[d].get("gamma")) for d in grid.datasets)])
        if r["paper"] is not None:
            naive, cos = r["paper"]["naive"] or {}, r["paper"]["cos"] or {}
            out.append([f"↳ paper: {r['paper_pair']}", f"{r['temperature']:g}",
                        *(text(naive.get(d), cos.get(d)) for d in grid.datasets)])
    return _table(["pair", "T", *grid.datasets], out) + _unmatched_note(rows, fam, ABLATION, NAIVE_COS)


def sweep_markdown(series: list[dict], param: str) -> list[str]:
    values = sorted({p["value"] for s in series for p in s["points"]})
    out = []
    for s in series:
        at = {p["value"]: p for p in s["points"]}
        out.append([s["pair"], s["dataset"], s["method"], f"{s['temperature']:g}",
                    *(speedup_text(at.get(v), with_gamma=False) if at.get(v) and at[v]["measured_speedup"] is not None
                      else DASH for v in values)])
    name = PARAM_NAMES[param]
    return _table(["pair", "dataset", "method", "T", *(f"{name} = {v:g}" for v in values)], out) + [
        "", f"Paper: {FIGURES[param]}"]


def quality_text(quality: dict | None, intervals: dict | None = None) -> str:
    """'pass@1 0.500 [0.280, 0.720]' per metric (intervals: {metric: [low, high]}, when known)."""
    with_ci = lambda k: "" if intervals is None else " " + interval(intervals.get(k), 3)  # noqa: E731
    return ", ".join(f"{k} {num(v, 3)}{with_ci(k)}" for k, v in (quality or {}).items()) or DASH


def identity_text(r: dict) -> str:
    """'14/16 (gaps 0.003, 0.041)': identical prompts, and at each difference log r(standard's token) -
    log r(ours) from a fresh forward (greedy_gap.py; near 0 = a float tie, '?' = not measured)."""
    if not r.get("greedy_compared"):
        return DASH
    gaps = r.get("greedy_gaps") or []
    shown = ", ".join("?" if g is None else f"{g:.3f}" for g in gaps)
    return f"{r['identical']}/{r['greedy_compared']}" + (f" (gap{'s' if len(gaps) > 1 else ''} {shown})" if gaps else "")


def load_text(r: dict) -> str:
    """'load 0.4 → 0.6, others 0.1 cores' of the kept measurement, ' ⚠busy' and the attempts when retried."""
    load = r.get("load")
    if not load:
        return "n/a"
    avg = lambda v: "?" if v is None else f"{v:.1f}"  # noqa: E731
    text = f"load {avg(load.get('loadavg_before'))} → {avg(load.get('loadavg_after'))}"
    text += "" if load.get("others_cores") is None else f", others {load['others_cores']:.2f} cores"
    text += f" of {load.get('cores')}" + (BUSY if r.get("busy") else "")
    return text + (f", {r['attempts']} attempts" if (r.get("attempts") or 0) > 1 else "")


def quality_markdown(results: list[dict]) -> list[str]:
    """Standard vs accelerated quality with 95% intervals (Wilson for 0/1 metrics, bootstrap for ROUGE),
    and how many prompts' greedy outputs were token-identical, per main cell."""
    rows = [[r["pair"], r["dataset"], f"{r['temperature']:g}", f"`{r['method']}` γ{r['gamma']}", str(r["prompts"]),
             quality_text(r["standard_quality"], r.get("standard_quality_interval") or {}),
             quality_text(r["quality"], r.get("quality_interval") or {}), identity_text(r)]
            for r in results if r["main"] and r["status"] == "done"]
    return _table(["pair", "dataset", "T", "method", "prompts", "standard", "accelerated", "greedy identical"], rows)


def cells_markdown(results: list[dict]) -> list[str]:
    header = ["cell", "prompts", "α", "c", "mean acc. len", "predicted", "measured [95%]", "measured / predicted",
              "tok/s", "standard tok/s", "quality", "standard quality", "greedy identical", "machine"]
    rows = [[r["id"], f"{r['prompts']}/{r['selected']}" if r["status"] == "done" else f"{r['status']} ({r['prompts']})",
             rate(r["acceptance_rate"]), num(r["cost_ratio"], 3), num(r["mean_acceptance_length"]),
             num(r["predicted_speedup"]), f"{num(r['measured_speedup'])} {interval(r.get('speedup_interval'))}",
             num(r["measured_over_predicted"]), num(r["tokens_per_second"]), num(r["standard_tokens_per_second"]),
             quality_text(r["quality"]), quality_text(r["standard_quality"]), identity_text(r), load_text(r)]
            for r in results]
    return _table(header, rows)
