"""A grid -> its cells, each with the run configuration run_dataset takes: configs/default.yaml +
configs/method/<method>.yaml (composed by Hydra once per method) + the cell's settings.

    cells = expand(grid, ROOT / "configs")   # every cell checked by run_config; nothing loaded

A cell is (pair, dataset, method, T, γ, λ or μ). Every cell runs with compare_with=standard, so its
speedup is measured side by side; the standard methods (we, cd) are never cells of their own. A sweep
value equal to a main-grid setting is the same cell (same id, same folder), run once.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..plan import DRAFTLESS, LOOPS
from ..runner.config import ALL_MEMBER_KEYS, MEMBER_KEYS, family, run_config
from .grid import Grid, Pair


@dataclass
class Cell:
    pair: str
    dataset: str
    method: str
    temperature: float
    gamma: int
    lam: float | None = None  # we, two members
    alpha: float | None = None  # cd
    main: bool = False  # part of the main tables (else only of sweeps)
    sweeps: list[str] = field(default_factory=list)
    config: dict = field(default_factory=dict)  # the run configuration run_dataset takes

    @property
    def family(self) -> str:
        return family(self.method)

    @property
    def id(self) -> str:
        """pair/dataset/method_T<t>_g<γ>[_lam<λ>|_a<α>]: the cell's folder under <report>/runs/."""
        extra = f"_lam{self.lam:g}" if self.lam is not None else f"_a{self.alpha:g}" if self.alpha is not None else ""
        return f"{self.pair}/{self.dataset}/{self.method}_T{self.temperature:g}_g{self.gamma}{extra}"


def expand(grid: Grid, config_dir: Path) -> list[Cell]:
    """Main cells (pair × dataset × method × T × γ), then sweep cells; each with its checked run config."""
    cells: dict[str, Cell] = {}

    def add(cell: Cell, sweep: str | None = None) -> None:
        cell = cells.setdefault(cell.id, cell)
        if sweep is None:
            cell.main = True
        elif sweep not in cell.sweeps:
            cell.sweeps.append(sweep)

    def cell(pair: Pair, dataset: str, method: str, t: float, gamma: int, value: dict | None = None) -> Cell:
        value = value or {}  # the swept parameter's value, if any
        two = family(method) == "we" and pair.weights is None
        lam = value.get("lambda", grid.lam) if two else None
        alpha = value.get("alpha", grid.alpha) if family(method) == "cd" else None
        return Cell(pair.name, dataset, method, t, gamma, lam, alpha)

    for pair in grid.pairs.values():
        for dataset in grid.datasets:
            for method in pair.methods:
                for t in grid.temperatures_of(method):
                    for gamma in [1] if LOOPS[method] in DRAFTLESS else pair.gammas:  # ME drafts nothing: one cell
                        add(cell(pair, dataset, method, t, gamma))
    for sweep in grid.sweeps:
        for name in sweep.pairs:
            for dataset in sweep.datasets:
                for v in sweep.values:
                    gamma = v if sweep.param == "gamma" else sweep.gamma
                    add(cell(grid.pairs[name], dataset, sweep.method, sweep.temperature, gamma, {sweep.param: v}),
                        sweep.param)
    bases = base_configs(config_dir, sorted({c.method for c in cells.values()}))
    for c in cells.values():
        c.config = copy.deepcopy(bases[c.method])
        for key, value in settings(c, grid).items():
            _set(c.config, key, value)
        try:
            run_config(c.config)
        except ValueError as e:
            raise ValueError(f"cell {c.id}: {e}") from None
    return list(cells.values())


def base_configs(config_dir: Path, methods: list[str]) -> dict[str, dict]:
    """configs/default.yaml + configs/method/<m>.yaml, composed by Hydra once per method, as plain dicts."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from ..runner.cli import plain

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir.resolve()), version_base="1.3"):
        return {m: plain(compose("default", overrides=[f"method={m}"])) for m in methods}


def settings(cell: Cell, grid: Grid) -> dict[str, object]:
    """The cell's config keys (dotted) -> values: every member, γ, temperature, λ/α given explicitly,
    so nothing depends on the defaults of configs/default.yaml."""
    pair, data = grid.pairs[cell.pair], grid.datasets[cell.dataset]
    keys = MEMBER_KEYS[cell.family]
    out: dict[str, object] = {f"method.{k}": None for k in ALL_MEMBER_KEYS if k not in keys}
    out.update({
        "method.model": pair.members[0],
        f"method.{keys[1]}": pair.members[1] if len(pair.members) == 2 else pair.members[1:],
        "method.gamma": [cell.gamma if i == pair.proposer else 1 for i in range(len(pair.members))],
        "method.proposer": pair.proposer, "method.bonus": "none",
        "method.schedule": "fixed",  # the paper's schedule: γ every round
        "method.generate.temperature": float(cell.temperature), "method.generate.max_tokens": data.max_tokens,
    })
    if cell.family == "we":
        out.update({"method.lambda": cell.lam, "method.weights": pair.weights})
    else:
        out["method.alpha"] = cell.alpha
    out.update({"dataset.name": data.name, "dataset.size": data.size, "dataset.path": data.path,
                "dataset.use_fewshot": data.use_fewshot, "dataset.chat_template": data.chat_template,
                "dataset.options": data.options, "compare_with": "standard"})
    out.update(grid.run)
    return out


def _set(cfg: dict, dotted: str, value) -> None:
    *parents, leaf = dotted.split(".")
    for part in parents:
        cfg = cfg.setdefault(part, {})
    cfg[leaf] = copy.deepcopy(value)


def _hydra_value(value) -> str:
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, list):
        return "[" + ",".join(_hydra_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{k}:{_hydra_value(v)}" for k, v in value.items()) + "}"
    return str(value)


def cell_command(cell: Cell, grid: Grid, out_dir: Path) -> str:
    """The main_dataset.py line that runs this one cell into out_dir (the same settings)."""
    args = [f"method={cell.method}", *(f"{k}={_hydra_value(v)}" for k, v in settings(cell, grid).items())]
    return "python main_dataset.py " + " ".join(args) + f" save_path={out_dir}"
