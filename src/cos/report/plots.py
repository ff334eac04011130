"""The tables' data (tables.py) -> PNG figures with matplotlib's Agg canvas (no display, no pyplot state).

speedup_<family>.png: grouped bars per dataset, our best-γ speedups with their bootstrap 95% intervals as
error bars, the paper's beside them (hatched, same colour) where the pair is the paper's.
<param>_sweep.png: measured (solid) and predicted (dashed) speedup against the swept value, one colour per
series. Every figure carries a caption with the grid file and the command that produced it.
"""

from __future__ import annotations

import math
from pathlib import Path

from matplotlib.figure import Figure

from .paper import ROLE_NAMES
from .tables import FAMILY_NAMES, PARAM_NAMES

NAN = math.nan


def _finish(fig: Figure, ax, title: str, caption: str, path: Path) -> None:
    ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.text(0.01, -0.02, caption, fontsize=7, ha="left", va="top")
    fig.savefig(path, dpi=110, bbox_inches="tight")


def error_bars(cells: list[dict | None]) -> list[list[float]]:
    """[[below...], [above...]] of each cell's measured speedup to its 95% interval (0 where none is known)."""
    def sides(c: dict | None) -> tuple[float, float]:
        ci, value = (c or {}).get("speedup_interval"), (c or {}).get("measured_speedup")
        return (0.0, 0.0) if not ci or value is None else (max(0.0, value - ci[0]), max(0.0, ci[1] - value))

    below, above = zip(*(sides(c) for c in cells)) if cells else ((), ())
    return [list(below), list(above)]


def speedup_plot(rows: list[dict], datasets: list[str], fam: str, caption: str, path: Path) -> None:
    bars = []  # (label, value per dataset, colour index, published?, error bars)
    for k, r in enumerate(rows):
        label = f"{r['pair']} T={r['temperature']:g} {ROLE_NAMES[r['role']]}"
        cells = [r["cells"][d] for d in datasets]
        bars.append((label, [(c or {}).get("measured_speedup", NAN) for c in cells], k, False, error_bars(cells)))
        if r["paper"] is not None:
            bars.append((f"paper {r['paper_pair']} T={r['temperature']:g} {ROLE_NAMES[r['role']]}",
                         [r["paper"].get(d, NAN) for d in datasets], k, True, None))
    fig = Figure(figsize=(min(16, 3 + 0.3 * len(datasets) * max(1, len(bars))), 4))
    ax = fig.subplots()
    width = 0.8 / max(1, len(bars))
    for i, (label, values, colour, paper, errors) in enumerate(bars):
        x = [j + (i - (len(bars) - 1) / 2) * width for j in range(len(datasets))]
        values = [NAN if v is None else v for v in values]
        ax.bar(x, values, width, label=label, color=f"C{colour % 10}", alpha=0.45 if paper else 1.0,
               hatch="//" if paper else None, edgecolor="black" if paper else None, linewidth=0.5,
               yerr=errors, capsize=3 if errors else 0, error_kw={"elinewidth": 0.8})
    ax.set_xticks(range(len(datasets)), datasets)
    ax.set_ylabel(f"speedup over standard {fam}")
    _finish(fig, ax, f"{FAMILY_NAMES[fam]}: best-γ speedup, measured side by side (bars: 95% interval)", caption,
            path)


def sweep_plot(series: list[dict], param: str, caption: str, path: Path) -> None:
    fig = Figure(figsize=(7, 4))
    ax = fig.subplots()
    for k, s in enumerate(series):
        points = [p for p in s["points"] if p["measured_speedup"] is not None]
        x = [p["value"] for p in points]
        label = f"{s['pair']} {s['dataset']} {s['method']} T={s['temperature']:g}"
        ax.plot(x, [p["measured_speedup"] for p in points], marker="o", color=f"C{k % 10}", label=label)
        ax.plot(x, [NAN if p["predicted_speedup"] is None else p["predicted_speedup"] for p in points],
                linestyle="--", marker=".", color=f"C{k % 10}", label=f"{label} (predicted)")
    ax.set_xticks(sorted({p["value"] for s in series for p in s["points"]}))
    ax.set_xlabel(PARAM_NAMES[param])
    ax.set_ylabel("speedup over the standard method")
    _finish(fig, ax, f"{PARAM_NAMES[param]} sweep: measured (solid) and predicted (dashed) speedup", caption, path)
