"""Method names -> what runs (docs/algorithm.md §4), validated before any model is loaded or run.

`REGISTRY` is the one place a method name is interpreted: the engine, the runner (config, backend,
vLLM build), lm-eval's arguments and the scripts read it (tests/test_method_registry.py holds them to it).

| method | loop | combination over | proposer |
|---|---|---|---|
| large_model | standard | [model] | - |
| sd | sd | [target] (draft outside) | the draft model |
| we, cd, custom | standard | all members | - |
| we_sd, cd_sd, custom_sd | naive | all members | fixed, default the smallest member |
| we_chef, cd_chef, custom_chef | cos | all members | alternating; default = largest γ |
| we_mix (ME) | mix | a weighted ensemble, sampled | none: one member runs per position |
| we_mix_sd | mix_sd | a weighted ensemble, sampled | fixed, default the smallest member |

A method's family (the part before `_`, or large_model / sd) fixes its members (config keys), the
combination its name implies and the standard method it must reproduce; its loop fixes whether it
drafts, whether it samples a mixture, and how backend=vllm runs it (hf runs every method).

gamma: an int, or a list with one entry per member in config order. For `cos`, an int γ means the
paper's setting: the default proposer drafts γ, every other member 1 (never "γ for everyone", which
made the LARGE model the default proposer in the reference code).

The mixture methods (cos/mixture.py) are exact only where r = Σ w_i p_i is a mixture of the members'
own sampling distributions: a weighted ensemble (probs space, processing per member) under sampling.
Anything else is refused before any model work, naming the method that applies.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from .combination import Combination, Contrastive, Single, WeightedEnsemble
from .sampling import SamplingParams
from .schedule import SCHEDULES
from .tree_draft import AUTO_SHAPE, TreeShape



@dataclass(frozen=True)
class Family:
    """Which members a family's methods take and what r they combine them into."""

    name: str
    member_keys: tuple[str, ...]  # method.<key> of each role, config order (the last may list several)
    n_members: int | None  # a fixed count; None: two or more
    preset: str | None  # the combination the name implies (presets.py); None: one model's own, or given (custom)
    standard: str  # the standard method every method of the family must reproduce
    one_model: bool = False  # r is one model's distribution (Single): no combination settings


@dataclass(frozen=True)
class LoopKind:
    """What a decoding loop does, for validation and messages (the loops themselves: methods/, engine.LOOP_MAKERS)."""

    what: str  # in words
    drafts: bool  # False: no γ, schedule, threshold or proposer to set
    mixture: bool  # samples r as a mixture (exact for a sampled weighted ensemble only)
    vllm: str | None  # what backend=vllm runs it as; None: not expressed there (backend=hf only)
    bonus_ignored: str | None  # why bonus=exact would be ignored; None: it applies (Naive-CoS)


@dataclass(frozen=True)
class Method:
    name: str
    loop: str  # a LOOP_KINDS key
    family: Family

    @property
    def backends(self) -> tuple[str, ...]:
        return ("hf", "vllm") if LOOP_KINDS[self.loop].vllm else ("hf",)


FAMILIES = {f.name: f for f in (
    Family("large_model", ("model",), 1, None, "large_model", one_model=True),
    Family("we", ("model", "extra_model"), None, "we", "we"),
    Family("cd", ("model", "amateur_model"), 2, "cd", "cd"),
    Family("custom", ("model", "extra_model"), None, None, "custom"),
    Family("sd", ("model", "draft_model"), 2, None, "large_model", one_model=True),
)}
LOOP_KINDS = {
    "standard": LoopKind("standard decoding", False, False, "standard decoding of the composite", "nothing is drafted"),
    "sd": LoopKind("speculative decoding with a draft model", True, False, "draft-model speculation on the target",
                   "sd always draws its bonus token from the target"),
    "naive": LoopKind("Naive-CoS", True, False, "draft-model speculation on the composite", None),
    "cos": LoopKind("CoS (alternate proposals)", True, False, "alternate proposals on the composite",
                    "CoS keeps the verifier's own bonus token as a pending proposal (docs/algorithm.md §4.2)"),
    "mix": LoopKind("mixture sampling (one member per position)", False, True, None, "nothing is drafted"),
    "mix_sd": LoopKind("mixture sampling with drafts", True, True, None,
                       "its bonus comes from a verifier that owns the next position"),
}
REGISTRY = {name: Method(name, loop, FAMILIES[family]) for name, loop, family in (  # the one table of methods
    ("large_model", "standard", "large_model"),
    ("we", "standard", "we"),
    ("cd", "standard", "cd"),
    ("custom", "standard", "custom"),
    ("sd", "sd", "sd"),
    ("we_sd", "naive", "we"),
    ("cd_sd", "naive", "cd"),
    ("custom_sd", "naive", "custom"),
    ("we_chef", "cos", "we"),
    ("cd_chef", "cos", "cd"),
    ("custom_chef", "cos", "custom"),
    ("we_mix", "mix", "we"),
    ("we_mix_sd", "mix_sd", "we"),
)}
LOOPS = {name: m.loop for name, m in REGISTRY.items()}  # method -> loop
BONUS_MODES = ("none", "exact")
TREE_LOOPS = ("sd", "naive", "cos")  # the loops that can draft a tree (methods/tree.py)
DRAFTLESS = tuple(loop for loop, kind in LOOP_KINDS.items() if not kind.drafts)  # ("standard", "mix")
MIXTURES = tuple(loop for loop, kind in LOOP_KINDS.items() if kind.mixture)  # ("mix", "mix_sd")


def method_info(name: str) -> Method:
    """The registry's row for a method name; ValueError naming the methods for any other."""
    if name not in REGISTRY:
        raise ValueError(f"unknown method {name!r}: use one of {', '.join(REGISTRY)}")
    return REGISTRY[name]


def ignored_bonus(method: str, bonus: str) -> str | None:
    """Why `method` would ignore bonus mode `bonus` (None when it would not)."""
    why = LOOP_KINDS[REGISTRY[method].loop].bonus_ignored if method in REGISTRY else None
    if bonus == "none" or why is None:
        return None
    naive = ", ".join(name for name, m in REGISTRY.items() if m.loop == "naive")
    return f"method {method} would ignore bonus={bonus!r}: it applies to Naive-CoS ({naive}) only; {why}"


@dataclass
class Plan:
    method: str
    loop: str  # a LOOP_KINDS key: standard | sd | naive | cos | mix | mix_sd
    combination: Combination
    n_members: int  # members loaded, config order (sd: [target, draft])
    gamma: int | list[int]
    proposer: int | None = None  # None = not yet resolved (smallest member)
    bonus: str = "none"
    draft_threshold: float = 0.0  # > 0: a draft ends after a token its proposer gave less (proposer.py)
    schedule: str | None = None  # fixed | adaptive (schedule.py); None: fixed (standard methods: n/a)
    tree: TreeShape | None = None  # draft trees (tree_draft.py) for sd, *_sd, *_chef; None: chains

    def __post_init__(self) -> None:
        method_info(self.method)
        self.tree = parse_tree(self.tree)
        if self.bonus not in BONUS_MODES:
            raise ValueError(f"unknown bonus mode {self.bonus!r}: use one of {', '.join(BONUS_MODES)}")
        expected = 2 if self.loop == "sd" else self.combination.n_members
        if self.n_members != expected:
            raise ValueError(f"method {self.method} needs {expected} members, got {self.n_members}")
        if self.loop == "sd" and not isinstance(self.combination, Single):
            raise ValueError("method sd verifies against the target alone; it takes no combination")
        gammas = [self.gamma] if isinstance(self.gamma, int) else list(self.gamma)
        if not isinstance(self.gamma, int) and len(gammas) != self.n_members:
            raise ValueError(
                f"gamma {gammas} has {len(gammas)} entries for {self.n_members} members; "
                f"give one per member in config order, or one int"
            )
        if any(isinstance(g, bool) or not isinstance(g, int) or g < 1 for g in gammas):
            raise ValueError(f"gamma must be an int >= 1 (or a list of them), got {self.gamma}")
        if self.proposer is not None and not 0 <= self.proposer < self.n_members:
            raise ValueError(f"proposer index {self.proposer} out of range for {self.n_members} members")
        if isinstance(self.draft_threshold, bool) or not isinstance(self.draft_threshold, (int, float)) \
                or not 0 <= self.draft_threshold < 1:
            raise ValueError(f"draft_threshold must be a probability in [0, 1) (0 = always draft γ), "
                             f"got {self.draft_threshold!r}")
        if self.draft_threshold and self.loop in DRAFTLESS:
            raise ValueError(f"method {self.method} drafts nothing: draft_threshold applies to sd, *_sd and *_chef")
        if self.draft_threshold and self.loop == "mix_sd":
            raise ValueError(f"method {self.method}: its blocks are fixed by the coins alone, so draft_threshold does "
                             f"not apply; unset it (0), or use we_sd / we_chef")
        if ignored_bonus(self.method, self.bonus):
            raise ValueError(ignored_bonus(self.method, self.bonus))
        if self.schedule is not None and self.schedule not in SCHEDULES:
            raise ValueError(f"unknown schedule {self.schedule!r}: use one of {', '.join(SCHEDULES)}")
        if self.schedule is not None and self.loop in DRAFTLESS:
            raise ValueError(f"method {self.method} drafts nothing: schedule applies to sd, *_sd and *_chef")
        if self.loop in DRAFTLESS and self.proposer is not None:
            raise ValueError(f"method {self.method} drafts nothing: proposer applies to *_sd and *_chef")
        if self.loop in MIXTURES and not isinstance(self.combination, WeightedEnsemble):
            applies = "cd_chef" if isinstance(self.combination, Contrastive) else "custom_chef"
            raise ValueError(f"method {self.method} samples r as a mixture, exact only for a weighted ensemble in "
                             f"probs space (r = Σ w_i p_i, temperature / top-k / top-p applied per member); "
                             f"{self.combination.describe()} is not one: use {applies}, which verifies against any r")
        if self.loop == "sd" and self.proposer not in (None, 1):
            raise ValueError("method sd: the proposer is the draft model (member 1)")
        if self.tree is not None:
            self._check_tree()

    def _check_tree(self) -> None:
        if self.loop not in TREE_LOOPS:
            with_trees = ", ".join(n for n, m in REGISTRY.items() if m.loop in TREE_LOOPS)
            raise ValueError(f"method {self.method} drafts no tree: tree applies to {with_trees}; remove it")
        if self.schedule == "adaptive" and not self.tree.auto:
            raise ValueError("tree: the adaptive schedule chooses chain lengths and does not size trees: use "
                             "schedule=fixed with a tree, tree=auto (chain or tree, whichever measures faster), "
                             "or tree=none with schedule=adaptive")
        if self.draft_threshold:
            raise ValueError("tree: draft_threshold ends chains early and does not apply to trees: unset it (0)")
        if self.loop == "cos" and not isinstance(self.gamma, int) and sorted(self.gamma)[-2] > 1:
            raise ValueError(f"tree with {self.method}: only the default proposer drafts a tree (the others "
                             f"propose one token each, alternately); gamma {self.gamma} gives another member "
                             f"more than 1: give one int, or 1 for every member but the proposer")

    def resolve(self, member_sizes: Sequence[int]) -> "Plan":
        """Fix the default proposer once member sizes are known (parameter counts, config order)."""
        if self.loop == "sd":
            self.proposer = 1
        elif self.loop == "cos" and not isinstance(self.gamma, int) and self.proposer is None:
            self.proposer = max(range(self.n_members), key=lambda i: (self.gamma[i], -i))
        elif self.loop in ("naive", "cos", *MIXTURES) and self.proposer is None:
            self.proposer = min(range(self.n_members), key=lambda i: (member_sizes[i], i))
        return self

    @property
    def gammas(self) -> list[int]:
        """γ per member, config order (int γ: the proposer's; others 1)."""
        if self.loop == "mix":  # ME: one position per round
            return [1] * self.n_members
        if not isinstance(self.gamma, int):
            return list(self.gamma)
        return [self.gamma if i == self.proposer else 1 for i in range(self.n_members)]

    def check_sampling(self, params: SamplingParams) -> None:
        """The mixture methods sample: greedy decoding (argmax r) is outside their exact domain."""
        if self.loop in MIXTURES and params.greedy:
            raise ValueError(f"method {self.method} samples r as a mixture, one member per position: exact under "
                             f"sampling only, and greedy decoding (temperature 0) takes argmax r, which no single "
                             f"member gives: use we_chef (exact for greedy decoding too), or a temperature > 0")


def parse_tree(tree) -> TreeShape | None:
    """`tree` as users give it: None / "none" (chains, the paper's), "auto" (a chain or a tree of 7 nodes,
    width 2, each round whichever measures faster), a mapping {nodes: N, width: W, lookup: L (optional, 0),
    children: distinct | iid (optional, distinct), auto: true | false (optional, false)}, "NxW", "NxW+L"
    or "NxW+L:iid" (the same in one word), or a TreeShape."""
    if tree is None or isinstance(tree, TreeShape):
        return tree
    if isinstance(tree, str) and tree.lower() == "none":
        return None
    if isinstance(tree, str) and tree.lower() == "auto":
        return TreeShape(*AUTO_SHAPE, auto=True)
    word = re.fullmatch(r"(\d+)x(\d+)(?:\+(\d+))?(?::(\w+))?", tree.strip()) if isinstance(tree, str) else None
    if word:  # "7x2", "7x2+3" or "7x2+3:iid": the one-word form (lm-eval's model_args)
        return TreeShape(int(word[1]), int(word[2]), int(word[3] or 0), word[4] or "distinct")
    keys = {"nodes", "width", "lookup", "children", "auto"}
    if hasattr(tree, "keys") and {"nodes", "width"} <= set(tree.keys()) <= keys:
        auto = tree.get("auto", False)
        if not isinstance(auto, bool):
            raise ValueError(f"tree auto must be true or false (a chain or this tree, each round whichever "
                             f"measures faster), got {auto!r}")
        return TreeShape(tree["nodes"], tree["width"], tree.get("lookup", 0), tree.get("children", "distinct"), auto)
    raise ValueError(f"tree must be none, auto, {{nodes: N, width: W, lookup: L, children: distinct|iid}} or NxW+L:iid "
                     f"(at most W nodes per level, N in total, L optional: a branch copied from the context; "
                     f"sampled children drawn without replacement unless :iid), got {tree!r}")


def default_schedule(tree) -> str:
    """The schedule users get where they set none: adaptive, except with a tree of a fixed shape, which is
    sized by `tree` (fixed; the chain rounds of `tree: auto` are adaptive)."""
    shape = parse_tree(tree)
    return "fixed" if shape is not None and not shape.auto else "adaptive"


def make_plan(
    method: str,
    n_members: int,
    combination: Combination | None = None,
    gamma: int | Sequence[int] = 5,
    proposer: int | None = None,
    bonus: str = "none",
    draft_threshold: float = 0.0,
    schedule: str | None = None,
    tree=None,
) -> Plan:
    """Validate a method configuration. Collaborative methods need a combination.

    draft_threshold > 0: γ becomes the most a proposer drafts at once; a draft also ends after a token
    the proposer gave probability below the threshold (transformers' assistant_confidence_threshold).
    """
    info = method_info(method)
    if info.family.one_model:
        combination = Single()
    elif combination is None:
        raise ValueError(f"method {method} needs a combination (weighted ensemble, contrastive, ...)")
    if isinstance(gamma, (list, tuple)) or (hasattr(gamma, "__iter__") and not isinstance(gamma, (str, bytes))):
        gamma = list(gamma)  # each entry is checked by Plan: an int >= 1, never a float or a bool
    elif isinstance(gamma, bool) or not isinstance(gamma, int):
        raise ValueError(f"gamma must be an int >= 1 (or a list of them, one per member), got {gamma!r} "
                         f"({type(gamma).__name__})")
    return Plan(method, info.loop, combination, n_members, gamma, proposer, bonus, draft_threshold, schedule, tree)
