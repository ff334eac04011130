"""A composed run configuration -> plain, checked arguments (CONTRIBUTING.md §12).

Hydra composes YAML at the entry points only; everything below them takes the dataclasses built
here. Every check runs before any model is loaded; every failure is a ValueError whose one-line
message names the key and what to change.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..byte_level.loading import BYTE_OPTIONS
from ..engine import plan_from_kwargs
from ..plan import DRAFTLESS, FAMILIES, REGISTRY, TREE_LOOPS, Plan, default_schedule, ignored_bonus, parse_tree
from ..sampling import SamplingParams
from .backend import check_backend, check_vllm_method, check_vllm_runtime
from .schema import check_keys

# Member keys of each method family, in config order (plan.FAMILIES)
MEMBER_KEYS = {name: f.member_keys for name, f in FAMILIES.items()}
ALL_MEMBER_KEYS = tuple(dict.fromkeys(key for keys in MEMBER_KEYS.values() for key in keys))


def family(method: str) -> str:
    """large_model | sd | we | cd | custom: which members a method takes (plan.REGISTRY)."""
    return REGISTRY[method].family.name


def standard_counterpart(method: str) -> str:
    """The method a speculative method must reproduce (the speed baseline of compare_with=standard)."""
    return REGISTRY[method].family.standard


def _int(name: str, value, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum):
        limit = f" >= {minimum}" if minimum is not None else ""
        raise ValueError(f"{name} must be an int{limit}, got {value!r}")
    return value


def _bool(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be true or false, got {value!r}")
    return value


@dataclass
class MethodSpec:
    """A method with its members (names as configured, config order) and plan arguments."""

    method: str
    members: list[str | None]
    roles: list[str]  # the config key of each member, for messages: method.model, method.extra_model[1]
    plan_kwargs: dict
    byte_level: bool | str = "auto"  # auto | true | false (cos.byte_level.loading.byte_level_reason)
    byte_options: dict = field(default_factory=dict)  # prune, draft_bytes: set, they apply over bytes only

    def plan(self) -> Plan:
        return plan_from_kwargs(self.method, len(self.members), **self.plan_kwargs)


@dataclass
class GenerateSpec:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        for key in ("temperature", "top_p"):
            if isinstance(getattr(self, key), bool) or not isinstance(getattr(self, key), (int, float)):
                raise ValueError(f"method.generate.{key} must be a number, got {getattr(self, key)!r}")
        _int("method.generate.top_k", self.top_k, 0)
        if self.max_tokens is not None:
            _int("method.generate.max_tokens", self.max_tokens, 1)
        try:
            SamplingParams(float(self.temperature), self.top_k, float(self.top_p))
        except ValueError as e:
            raise ValueError(f"method.generate: {e}") from None


@dataclass
class RunConfig:
    """Everything main_dataset.py / main_case.py need, checked."""

    dataset: dict  # name, size, use_fewshot, path, chat_template, options
    method: MethodSpec
    generate: GenerateSpec
    baseline: MethodSpec | None = None  # compare_with
    seed: int = 42
    max_prompt_len: int = -1
    devices: list = field(default_factory=lambda: ["auto"])  # one per member
    dtypes: list = field(default_factory=lambda: ["float32"])
    threads: int | str | None = "auto"  # CPU threads per forward (threads.py)
    compile: bool = False  # static caches + torch.compile'd decode forwards (CUDA graphs on CUDA)
    kernels: bool | str = "auto"  # the row-invariant CPU kernels: auto = true (wherever they run) | false (torch's ops)
    warmup: int = 1
    progress: bool = True
    backend: str = "hf"  # hf | vllm (backend.py)
    vllm_options: dict = field(default_factory=dict)  # backend=vllm: options for vllm.LLM


def method_spec(m: Mapping) -> MethodSpec:
    """The method section -> members in config order + plan arguments (validated by `plan()`)."""
    name = m.get("name")
    if name not in REGISTRY:
        raise ValueError(f"unknown method {name!r}: use method=<config in configs/method> (methods: {', '.join(REGISTRY)})")
    keys = REGISTRY[name].family.member_keys
    for key in ALL_MEMBER_KEYS:
        if key not in keys and m.get(key) is not None:
            raise ValueError(f"method {name} takes members {' + '.join(keys)}: unset method.{key}")
    members, roles = [m.get("model")], ["method.model"]
    if len(keys) > 1:
        extra = m.get(keys[1])
        extras = extra if isinstance(extra, (list, tuple)) else [extra]
        if keys[1] == "extra_model" and isinstance(extra, (list, tuple)):
            roles += [f"method.extra_model[{i}]" for i in range(len(extras))]
        else:
            roles.append(f"method.{keys[1]}")
        members += list(extras)
    byte_level = m.get("byte_level", "auto")
    if byte_level not in ("auto", True, False):
        raise ValueError(f"method.byte_level must be auto, true or false, got {byte_level!r}")
    byte_options = {key: m[key] for key in BYTE_OPTIONS if m.get(key) is not None}
    if "prune" in byte_options and (isinstance(byte_options["prune"], bool) or
                                    not isinstance(byte_options["prune"], (int, float)) or
                                    not 0 <= byte_options["prune"] < 1):
        raise ValueError(f"method.prune must be a number in [0, 1) (0 keeps every tokenization: exact), "
                         f"got {byte_options['prune']!r}")
    if "draft_bytes" in byte_options:
        _int("method.draft_bytes", byte_options["draft_bytes"], 1)
    return MethodSpec(name, members, roles, _plan_kwargs(name, m), byte_level, byte_options)


def _plan_kwargs(name: str, m: Mapping) -> dict:
    loop, fam = REGISTRY[name].loop, REGISTRY[name].family
    gamma = m.get("gamma", 5)
    entries = gamma if isinstance(gamma, (list, tuple)) else [gamma]
    if any(isinstance(g, bool) or not isinstance(g, int) for g in entries):
        raise ValueError(f"method.gamma must be an int or a list of ints (one per member), got {gamma!r}")
    kw: dict = {"gamma": list(gamma) if isinstance(gamma, (list, tuple)) else gamma,
                # only Naive-CoS draws a bonus; a *_sd method's baseline inherits its bonus, unused
                "bonus": m.get("bonus", "none") if loop == "naive" else "none"}
    if m.get("draft_threshold") is not None:
        kw["draft_threshold"] = m["draft_threshold"]  # checked by the plan (a probability in [0, 1))
    tree = m.get("tree")
    if tree is not None:
        kw["tree"] = dict(tree) if isinstance(tree, Mapping) else tree  # checked by the plan
    # checked by the plan (fixed | adaptive); a tree of a fixed shape is sized by method.tree: fixed
    kw["schedule"] = m.get("schedule") or default_schedule(kw.get("tree"))
    if loop in DRAFTLESS:  # nothing is drafted: a speculative method's gamma, threshold, schedule, tree do not apply
        kw["gamma"] = 1
        kw.pop("draft_threshold", None)
        kw.pop("schedule")
        kw.pop("tree", None)
    if loop in ("naive", "cos", "mix_sd") and m.get("proposer") is not None:
        kw["proposer"] = _int("method.proposer", m["proposer"], 0)
    combination = m.get("combination")
    if fam.one_model:
        return kw
    if isinstance(combination, Mapping):
        unknown = set(combination) - {"target", "space", "kwargs"}
        if unknown:
            raise ValueError(f"method.combination takes target, space, kwargs; unknown: {', '.join(sorted(unknown))}")
        kw.update(combination="custom", target=combination.get("target"), space=combination.get("space", "logits"),
                  kwargs=dict(combination.get("kwargs") or {}))
    elif combination is not None:
        kw["combination"] = combination
    elif fam.preset is None:  # custom: the name implies no combination
        raise ValueError(f"method {name} needs method.combination: a preset (mean, proxy_tuning, realignment) "
                         f"or {{target: module:function, space: probs|logits|raw-logits, kwargs: {{}}}}")
    kw.update(lam=m.get("lambda"), weights=m.get("weights"), alpha=m.get("alpha", 0.1),
              plausibility=m.get("plausibility", 0.0))
    return kw


def baseline_spec(m: Mapping, other: str) -> MethodSpec | None:
    """compare_with: method `other` on the members of the method section `m` (large_model: the first);
    None when `other` is the method itself (compare_with=standard on a standard method)."""
    name = m.get("name")
    other = standard_counterpart(name) if other == "standard" else other
    if other == name:
        return None  # a standard method compared with itself: nothing to compare
    if other not in REGISTRY:
        raise ValueError(f"compare_with={other!r} is not a method: use standard or one of {', '.join(REGISTRY)}")
    if REGISTRY[other].family.n_members == 1:  # large_model: the first member alone
        return method_spec({"name": other, "model": m.get("model")})
    if family(other) != family(name):
        raise ValueError(f"compare_with={other} cannot run on the members of method {name}: "
                         f"use compare_with={standard_counterpart(name)} or large_model")
    return method_spec({**m, "name": other})


def _per_member(key: str, value, n: int) -> list:
    values = list(value) if isinstance(value, (list, tuple)) else [value] * n
    if len(values) != n:
        raise ValueError(f"{key} has {len(values)} entries for {n} members: give one value or one per member")
    return [str(v) for v in values]


def refuse_ignored(m: Mapping) -> None:
    """Settings the method in `m` would ignore are errors (its baseline inherits them unused)."""
    name = m.get("name")
    info = REGISTRY.get(name)  # None: an unknown name, refused by method_spec
    if info is not None and info.loop in DRAFTLESS and m.get("draft_threshold") is not None:
        raise ValueError(f"method {name} drafts nothing, so it would ignore method.draft_threshold: it applies to "
                         f"sd, *_sd and *_chef; unset it (method.draft_threshold=null)")
    if info is not None and info.loop not in TREE_LOOPS and parse_tree(m.get("tree")) is not None:
        raise ValueError(f"method {name} drafts no tree, so it would ignore method.tree: it applies to sd, *_sd "
                         f"and *_chef; unset it (method.tree=none)")
    if ignored_bonus(name, m.get("bonus", "none")):
        raise ValueError(f"{ignored_bonus(name, m['bonus'])}: set method.bonus=none")
    # (method.proposer on a standard method is not refused: the reproduction grids set it on every cell,
    # and their saved configs must keep resuming; the API refuses it)
    if info is not None and info.family.one_model:
        set_here = [k for k, default in (("lambda", None), ("weights", None), ("combination", None), ("alpha", 0.1),
                                         ("plausibility", 0.0)) if m.get(k) not in (None, default)]
        if set_here:
            raise ValueError(f"method {name} uses one model's distribution, so it would ignore "
                             f"{', '.join('method.' + k for k in set_here)}: unset "
                             f"{'it' if len(set_here) == 1 else 'them'}")


def _threads(value):
    """threads: auto | an int >= 1 | null (torch's own setting)."""
    if value is None or value == "auto":
        return value
    return _int("threads", value, 1)


def _kernels(value):
    """kernels: auto | true | false."""
    return value if value == "auto" else _bool("kernels", value)


def run_config(cfg: Mapping) -> RunConfig:
    """Check a composed config (a plain dict) and return the run's arguments."""
    check_keys(cfg)
    refuse_ignored(cfg["method"])
    spec = method_spec(cfg["method"])
    plan = spec.plan()  # method, gamma, weights, combination: all validated here, nothing loaded
    generate = GenerateSpec(**cfg["method"].get("generate", {}))
    try:  # the mixture methods sample: greedy is refused here, not at the first prompt
        plan.check_sampling(SamplingParams(float(generate.temperature), generate.top_k, float(generate.top_p)))
    except ValueError as e:
        raise ValueError(f"{e} (method.generate.temperature)") from None
    baseline = baseline_spec(cfg["method"], cfg["compare_with"]) if cfg.get("compare_with") else None
    if baseline is not None:
        baseline.plan()
    backend = check_backend(cfg.get("backend", "hf"))
    vllm_options = {}
    if backend == "vllm" and spec.byte_level is True:
        raise ValueError("method.byte_level=true: members over bytes run on backend=hf only; set backend=hf")
    if backend == "vllm":  # what vLLM cannot express fails here, before any model loads
        vllm_options = check_vllm_runtime(cfg)
        spec = check_vllm_method(spec, cfg["method"].get("schedule"))
        if baseline is not None:
            baseline = check_vllm_method(baseline, None, role="compare_with=")
    elif cfg.get("vllm"):
        raise ValueError(f"vllm={cfg['vllm']!r} applies to backend=vllm only: set backend=vllm, or unset vllm")
    dataset = dict(cfg.get("dataset") or {})
    for key in ("use_fewshot", "chat_template"):
        dataset[key] = _bool(f"dataset.{key}", dataset.get(key, key == "use_fewshot"))
    if not isinstance(dataset.get("options") or {}, Mapping):
        raise ValueError(f"dataset.options must be a mapping, got {dataset['options']!r}")
    max_prompt_len = _int("max_prompt_len", cfg.get("max_prompt_len", -1))
    if max_prompt_len == 0 or max_prompt_len < -1:
        raise ValueError(f"max_prompt_len must be -1 (whole prompt) or >= 1, got {max_prompt_len}")
    n = len(spec.members)
    return RunConfig(dataset=dataset, method=spec, generate=generate, baseline=baseline,
                     seed=_int("seed", cfg.get("seed", 42), 0), max_prompt_len=max_prompt_len,
                     devices=_per_member("device", cfg.get("device", "auto"), n),
                     dtypes=_per_member("dtype", cfg.get("dtype", "float32"), n),
                     threads=_threads(cfg.get("threads", "auto")), compile=_bool("compile", cfg.get("compile", False)),
                     kernels=_kernels(cfg.get("kernels", "auto")),
                     warmup=_int("warmup", cfg.get("warmup", 1), 0), progress=_bool("progress", cfg.get("progress", True)),
                     backend=backend, vllm_options=vllm_options)
