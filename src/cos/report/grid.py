"""A reproduction grid (configs/reproduce/<name>.yaml, layout documented in cpu-small.yaml): read and
check it into plain dataclasses. cells.py expands it into cells.

    grid = load_grid("cpu-small", ROOT / "configs")   # a name under configs/reproduce/, or a path

Every check runs before anything is loaded; every failure is a ValueError whose one line names the
grid key and what to change.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from ..datasets import REGISTRY
from ..runner.config import family
from .paper import paper_pairs

METHODS = ("we_sd", "we_chef", "cd_sd", "cd_chef", "we_mix", "we_mix_sd")  # accelerated; each cell's baseline is
# its standard method (we_mix, we_mix_sd: sampling only, so a grid runs them at its WE temperatures > 0)
FAMILIES = ("we", "cd")
SWEEP_FAMILY = {"lambda": "we", "alpha": "cd", "gamma": None}  # swept parameter -> the family it applies to
KEYS = {
    "grid": ("name", "description", "pairs", "datasets", "methods", "temperatures", "gammas", "lambda", "alpha",
             "sweeps", "run"),
    "pair": ("model", "other", "proposer", "weights", "paper_pair", "methods", "gammas"),
    "dataset": ("name", "size", "max_tokens", "path", "use_fewshot", "chat_template", "options"),
    "sweep": ("method", "values", "datasets", "pairs", "temperature", "gamma"),
    "run": ("dtype", "device", "seed", "warmup", "progress", "max_prompt_len"),
}
RUN_DEFAULTS = {"dtype": "float32", "device": "auto", "seed": 42, "warmup": 1, "progress": True, "max_prompt_len": -1}
NAME = re.compile(r"^[\w.-]+$")  # pair and dataset keys become folder names


@dataclass
class Pair:
    name: str
    members: list[str]  # config order: model, then other (one name, or a list for an n-member ensemble)
    proposer: int  # the member that drafts γ in *_sd and starts in *_chef; every other member drafts 1
    methods: list[str]
    gammas: list[int]
    weights: list[float] | None  # n-member weighted ensemble; None: two members with the grid's λ
    paper_pair: dict[str, str]  # family -> the paper's pair name (paper.py), when the models are the paper's


@dataclass
class Dataset:
    key: str  # the grid's name for it (a folder name); `name` is the adapter
    name: str
    size: str | int
    max_tokens: int | None
    path: str | None
    use_fewshot: bool
    chat_template: bool
    options: dict


@dataclass
class Sweep:
    param: str  # lambda | alpha | gamma
    method: str
    values: list
    datasets: list[str]
    pairs: list[str]
    temperature: float
    gamma: int | None


@dataclass
class Grid:
    name: str
    path: Path
    description: str
    pairs: dict[str, Pair]
    datasets: dict[str, Dataset]
    temperatures: dict[str, list[float]]  # family (or a method, overriding its family) -> temperatures
    lam: float
    alpha: float
    sweeps: list[Sweep]
    run: dict

    def temperatures_of(self, method: str) -> list[float]:
        """The temperatures a method runs at: its own entry, else its family's."""
        return self.temperatures.get(method, self.temperatures.get(family(method), []))


# --- checks: one line naming the key ----------------------------------------------------------------
def _mapping(value, key: str, allowed: tuple[str, ...] | None = None) -> dict:
    if not isinstance(value, Mapping):
        raise ValueError(f"{key} must be a mapping, got {value!r}")
    unknown = [k for k in value if allowed is not None and k not in allowed]
    if unknown:
        raise ValueError(f"{key}: unknown key {unknown[0]!r}; the keys are {', '.join(allowed)}")
    return dict(value)


def _list(value, key: str) -> list:
    if value is None or value == []:
        raise ValueError(f"{key} is missing or empty: give at least one value")
    return value if isinstance(value, list) else [value]


def _int(value, key: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{key} must be an int >= {minimum}, got {value!r}")
    return value


def _number(value, key: str, low: float = 0.0, high: float | None = None) -> float:
    number = not isinstance(value, bool) and isinstance(value, (int, float))
    if not number or value < low or (high is not None and value > high):
        bounds = f"in [{low:g}, {high:g}]" if high is not None else f">= {low:g}"
        raise ValueError(f"{key} must be a number {bounds}, got {value!r}")
    return value


def _choice(value, key: str, choices, what: str) -> str:
    if value not in choices:
        raise ValueError(f"{key}: unknown {what} {value!r}; use one of {', '.join(map(str, choices))}")
    return value


def _name(value: str, key: str) -> str:
    if not NAME.match(str(value)):
        raise ValueError(f"{key}: {value!r} becomes a folder name: use letters, digits, '.', '_' or '-'")
    return str(value)


# --- loading ----------------------------------------------------------------------------------------
def grid_path(grid: str | Path, config_dir: Path) -> Path:
    """A grid file given by path, or by name: configs/reproduce/<name>.yaml."""
    path = Path(grid)
    if path.is_file():
        return path
    named = config_dir / "reproduce" / f"{grid}.yaml"
    if named.is_file():
        return named
    names = sorted(p.stem for p in (config_dir / "reproduce").glob("*.yaml"))
    raise ValueError(f"grid {str(grid)!r} not found: give a YAML file or one of {', '.join(names)} "
                     f"(configs/reproduce/)")


def _pair(name: str, raw, grid: dict) -> Pair:
    key = f"pairs.{_name(name, 'pairs')}"
    raw = _mapping(raw, key, KEYS["pair"])
    members = [raw.get("model"), *_list(raw.get("other"), f"{key}.other")]
    if not all(isinstance(m, str) and m for m in members):
        raise ValueError(f"{key}: model must be a model name, other a name or a list of names; got {members}")
    at = lambda k: f"{key}.{k}" if k in raw else k  # the key the value came from: the pair's or the grid's
    methods = [_choice(m, at("methods"), METHODS, "method") for m in _list(raw.get("methods", grid.get("methods")),
                                                                             at("methods"))]
    if len(members) > 2 and any(family(m) != "we" for m in methods):
        raise ValueError(f"{key}.other: a list of members is an n-member weighted ensemble: keep only we_* methods")
    weights = raw.get("weights")
    if weights is not None:
        weights = [_number(w, f"{key}.weights", 0.0, 1.0) for w in _list(weights, f"{key}.weights")]
        if len(weights) != len(members) or abs(sum(weights) - 1) > 1e-6:
            raise ValueError(f"{key}.weights: give {len(members)} weights (one per member) summing to 1, got {weights}")
    elif len(members) > 2:
        raise ValueError(f"{key}.weights: a {len(members)}-member ensemble needs weights, one per member")
    proposer = _choice(raw.get("proposer", "other"), f"{key}.proposer", ("model", "other"), "proposer")
    paper = _mapping(raw.get("paper_pair") or {}, f"{key}.paper_pair", FAMILIES)
    for fam, published in paper.items():
        if published is not None:
            _choice(published, f"{key}.paper_pair.{fam}", paper_pairs(fam), f"published {fam.upper()} pair")
    gammas = [_int(g, at("gammas")) for g in _list(raw.get("gammas", grid.get("gammas")), at("gammas"))]
    return Pair(name, members, 0 if proposer == "model" else 1, methods, gammas, weights,
                {fam: p for fam, p in paper.items() if p is not None})


def _dataset(name: str, raw, root: Path) -> Dataset:
    key = f"datasets.{_name(name, 'datasets')}"
    raw = _mapping(raw or {}, key, KEYS["dataset"])
    adapter = _choice(raw.get("name", name), f"{key}.name" if "name" in raw else key, sorted(REGISTRY), "dataset")
    size = raw.get("size", "tiny")
    if not (size in ("tiny", "small", "full") or (not isinstance(size, bool) and isinstance(size, int) and size > 0)):
        raise ValueError(f"{key}.size must be tiny, small, full or a positive int, got {size!r}")
    max_tokens = raw.get("max_tokens")
    path = raw.get("path")
    if path is not None:
        path = str((root / Path(path).expanduser()).resolve())  # relative paths: from the repository root
    for flag in ("use_fewshot", "chat_template"):
        if not isinstance(raw.get(flag, False), bool):
            raise ValueError(f"{key}.{flag} must be true or false, got {raw[flag]!r}")
    return Dataset(name, adapter, size, None if max_tokens is None else _int(max_tokens, f"{key}.max_tokens"),
                   path, raw.get("use_fewshot", True), raw.get("chat_template", False),
                   _mapping(raw.get("options") or {}, f"{key}.options"))


def _temperatures(raw) -> dict[str, list[float]]:
    """A list for every family, or {we: [...], cd: [...]}; a method's own entry (we_mix: [1]) overrides its
    family's for that method."""
    raw = raw if isinstance(raw, Mapping) else {fam: raw for fam in FAMILIES}
    _mapping(raw, "temperatures", FAMILIES + METHODS)
    return {key: [_number(t, f"temperatures.{key}") for t in _list(ts, f"temperatures.{key}")]
            for key, ts in raw.items()}


def _sweep(param: str, i: int, raw, grid: Grid) -> Sweep:
    key = f"sweeps.{param}[{i}]"
    raw = _mapping(raw, key, KEYS["sweep"])
    methods = [m for m in METHODS if SWEEP_FAMILY[param] in (None, family(m))]
    method = _choice(raw.get("method"), f"{key}.method", methods, "method for this sweep")
    values = _list(raw.get("values"), f"{key}.values")
    check = {"lambda": lambda v, k: _number(v, k, 0.0, 1.0), "alpha": _number, "gamma": _int}[param]
    values = [check(v, f"{key}.values") for v in values]
    datasets = [_choice(d, f"{key}.datasets", list(grid.datasets), "dataset of this grid")
                for d in _list(raw.get("datasets", list(grid.datasets)), f"{key}.datasets")]
    fitting = [n for n, p in grid.pairs.items() if method in p.methods and not (param == "lambda" and p.weights)]
    pairs = [_choice(p, f"{key}.pairs", fitting, f"pair running {method}")
             for p in _list(raw.get("pairs", fitting), f"{key}.pairs")]
    default_t = (grid.temperatures_of(method) or [None])[0]
    temperature = _number(raw.get("temperature", default_t), f"{key}.temperature")
    gamma = raw.get("gamma")
    if param == "gamma" and gamma is not None:
        raise ValueError(f"{key}.gamma: the γ sweep takes its γ from values: remove {key}.gamma")
    if param != "gamma":
        gamma = _int(gamma, f"{key}.gamma")
    return Sweep(param, method, values, datasets, pairs, temperature, gamma)


def load_grid(grid: str | Path, config_dir: Path) -> Grid:
    """Read and check a grid file (by name or path); relative dataset paths are from the repository root."""
    path = grid_path(grid, config_dir)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise ValueError(f"{path} is not valid YAML: {' '.join(str(e).split())}") from None
    raw = _mapping(raw, f"grid {path}", KEYS["grid"])
    for required in ("pairs", "datasets", "temperatures"):
        if not raw.get(required):
            raise ValueError(f"{required} is missing: see configs/reproduce/cpu-small.yaml for the layout")
    run = {**RUN_DEFAULTS, **_mapping(raw.get("run") or {}, "run", KEYS["run"])}
    _choice(run["dtype"], "run.dtype", ("float32", "bfloat16", "float16"), "dtype")
    _int(run["seed"], "run.seed", 0), _int(run["warmup"], "run.warmup", 0)
    if not isinstance(run["progress"], bool):
        raise ValueError(f"run.progress must be true or false, got {run['progress']!r}")
    datasets = _mapping(raw["datasets"], "datasets")
    out = Grid(name=_name(raw.get("name", path.stem), "name"), path=path, description=str(raw.get("description", "")),
               pairs={n: _pair(n, p, raw) for n, p in _mapping(raw["pairs"], "pairs").items()},
               datasets={n: _dataset(n, d, config_dir.parent) for n, d in datasets.items()},
               temperatures=_temperatures(raw["temperatures"]), lam=_number(raw.get("lambda", 0.5), "lambda", 0.0, 1.0),
               alpha=_number(raw.get("alpha", 0.1), "alpha"), sweeps=[], run=run)
    for pair in out.pairs.values():
        missing = [m for m in pair.methods if not out.temperatures_of(m)]
        if missing:
            raise ValueError(f"temperatures.{family(missing[0])} is missing: pair {pair.name} runs {missing[0]}")
    for param, sweeps in _mapping(raw.get("sweeps") or {}, "sweeps", tuple(SWEEP_FAMILY)).items():
        out.sweeps += [_sweep(param, i, s, out) for i, s in enumerate(_list(sweeps, f"sweeps.{param}"))]
    return out
