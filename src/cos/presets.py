"""Named combinations (ALGORITHM.md §2) from plain arguments: what configs and the API call."""

from __future__ import annotations

from collections.abc import Sequence

from .combination import Combination, Contrastive, Custom, Mean, ProxyTuning, Realignment, WeightedEnsemble, import_callable

PRESETS = ("we", "cd", "mean", "proxy_tuning", "realignment", "custom")


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
    plausibility), mean, proxy_tuning, realignment (lam), custom (target 'module:function', space)."""
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
