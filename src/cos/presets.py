"""Named combinations (docs/algorithm.md §2) from plain arguments: what configs and the API call."""

from __future__ import annotations

from collections.abc import Sequence

from .combination import Combination, Contrastive, Custom, Mean, ProxyTuning, Realignment, WeightedEnsemble, import_callable

PRESETS = ("we", "cd", "mean", "proxy_tuning", "realignment", "custom")
USES = {"we": ("lambda", "weights"), "cd": ("alpha", "plausibility"), "mean": (), "proxy_tuning": (),
        "realignment": ("lambda",), "custom": ("target", "space", "kwargs")}  # the settings each kind reads


def make_combination(
    kind: str,
    n_members: int,
    *,
    lam: float | None = None,
    weights: Sequence[float] | None = None,
    alpha: float = 0.1,
    plausibility: float = 0.0,
    target: str | None = None,
    space: str = "logits",
    kwargs: dict | None = None,
) -> Combination:
    """kind: we (weights, or `lam` for two members: r = (1-λ) p_model + λ p_extra), cd (alpha,
    plausibility), mean, proxy_tuning, realignment (lam), custom (target 'module:function', space).
    A setting the kind would ignore is an error that says so (a user's setting is never dropped)."""
    given = {"lambda": lam is not None, "weights": weights is not None, "alpha": alpha != 0.1,
             "plausibility": plausibility != 0.0, "target": target is not None, "space": space != "logits",
             "kwargs": bool(kwargs)}
    unused = [key for key, is_set in given.items() if is_set and key not in USES.get(kind, given)]
    if unused:
        uses = ", ".join(USES[kind]) or "no settings"
        raise ValueError(f"the {kind} combination would ignore {', '.join(unused)} (it takes {uses}): unset "
                         f"{'it' if len(unused) == 1 else 'them'}")
    if kind == "we" and lam is not None and weights is not None:
        raise ValueError("weighted ensemble: give weights (one per member) or lambda (two members), not both: with "
                         "weights, lambda would be ignored; set lambda to null")
    if kind == "we":
        if weights is not None:
            return WeightedEnsemble(n_members=n_members, weights=tuple(weights))
        if n_members == 2:
            return WeightedEnsemble.two_member(0.5 if lam is None else lam)
        raise ValueError(f"weighted ensemble of {n_members} members needs `weights` (one per member, summing to 1)")
    if kind == "cd":
        return Contrastive(n_members=n_members, alpha=alpha, plausibility=plausibility)
    if kind == "mean":
        return Mean(n_members=n_members)
    if kind == "proxy_tuning":
        return ProxyTuning(n_members=n_members)
    if kind == "realignment":
        return Realignment(n_members=n_members, lam=1.0 if lam is None else lam)
    if kind == "custom":
        if not target:
            raise ValueError("custom combination needs `target: package.module:function`")
        return Custom(n_members=n_members, fn=import_callable(target), declared_space=space, kwargs=dict(kwargs or {}))
    raise ValueError(f"unknown combination {kind!r}: use one of {', '.join(PRESETS)}")
