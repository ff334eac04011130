"""Combination functions: members' logits -> the combined distribution r (docs/algorithm.md §2).

Every combination declares its `space`:
- `probs`: each member's logits are processed into p_i, then mixed in probability space;
- `logits`: each member's logits are processed, combined, then softmax;
- `raw-logits`: raw logits are combined first, then processed, then softmax.

Arguments always arrive in config order [model, extra_1, extra_2, ...], whatever the proposer order.
`Combination.distribution` returns r as float32 probabilities [..., V].
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from .sampling import SamplingParams, process_logits, to_probs

SPACES = ("probs", "logits", "raw-logits")


@dataclass
class Combination:
    """r = f(l_1..l_n). Subclasses implement `combine` in their declared space."""

    n_members: int = 2
    space: str = field(default="probs", init=False)
    _values_checked: bool = field(default=False, init=False, repr=False, compare=False)

    def combine(self, values: Sequence[torch.Tensor]) -> torch.Tensor:
        raise NotImplementedError

    def distribution(self, member_logits: Sequence[torch.Tensor], params: SamplingParams) -> torch.Tensor:
        """r as probabilities [..., V] from raw member logits, each [..., V], in config order.

        The output's type and shape are checked on every call (no device sync); its values (finite,
        a distribution after normalisation) on the first call only, which costs one sync.
        """
        assert len(member_logits) == self.n_members, (len(member_logits), self.n_members)
        if self.space == "probs":
            values = [to_probs(l, params) for l in member_logits]
        elif self.space == "logits":
            values = [process_logits(l, params) for l in member_logits]
        else:
            values = [l.float() for l in member_logits]
        out = self._checked_shape(self.combine(values), member_logits[0])
        if self.space == "probs":
            r = out / out.sum(-1, keepdim=True)
        elif self.space == "logits":
            r = out.softmax(-1)
        else:
            r = process_logits(out, params).softmax(-1)
        if not self._values_checked:
            self._check_values(out, r)
            self._values_checked = True
        return r

    def proposal(self, member_logits: Sequence[torch.Tensor | None], params: SamplingParams) -> torch.Tensor:
        """A law q [..., V] to draw a proposal from where only some members ran (None: a member without
        logits at this position; config order). The draw is later verified against r with this q, so any q
        is exact; the closer to r, the more is accepted. Here: the first given member's own p_i."""
        return to_probs(next(l for l in member_logits if l is not None), params)

    def describe(self) -> str:
        """How errors name this combination."""
        return f"combination {type(self).__name__} ({self.space} space)"

    def probe(self, vocab_size: int, device: torch.device | str = "cpu") -> None:
        """Run once on seeded random logits [2, V] per member, to fail before generation (not mid-run)."""
        generator = torch.Generator(device="cpu").manual_seed(0)
        logits = [torch.randn(2, vocab_size, generator=generator).to(device) for _ in range(self.n_members)]
        self._values_checked = False
        self.distribution(logits, SamplingParams())

    def _checked_shape(self, out: object, like: torch.Tensor) -> torch.Tensor:
        what = "probabilities" if self.space == "probs" else "logits"
        if not isinstance(out, torch.Tensor):  # ValueError: a user's configuration error, one line in the CLI
            raise ValueError(
                f"{self.describe()} returned {type(out).__name__}, not a tensor: it must return {what} of "
                f"the members' shape {list(like.shape)} ([..., V], V = {like.shape[-1]})"
            )
        if out.shape != like.shape:
            raise ValueError(
                f"{self.describe()} returned shape {list(out.shape)}; it must return {what} of the members' "
                f"shape {list(like.shape)} ([..., V], V = {like.shape[-1]}: one entry per vocabulary token)"
            )
        return out

    def _check_values(self, out: torch.Tensor, r: torch.Tensor) -> None:
        """One sync: out has no NaN (and no negative value in probs space); r is a distribution."""
        negative = (out < 0).any() if self.space == "probs" else torch.zeros((), dtype=torch.bool, device=out.device)
        sums = r.float().sum(-1)
        nan_out, bad_r, negative, off = torch.stack([
            out.isnan().any(), ~torch.isfinite(r).all(), negative, ((sums - 1).abs() > 1e-2).any()]).tolist()
        problem = ("NaN values" if nan_out else "negative probabilities" if negative
                   else "a row that is not a distribution after normalisation (all zero, all -inf or +inf)"
                   if bad_r or off else None)
        if problem:
            raise ValueError(f"{self.describe()} returned {problem}; r must be a valid distribution over the "
                             f"vocabulary in every row")


def _check_space(space: str) -> str:
    if space not in SPACES:
        raise ValueError(f"unknown combination space {space!r}: use one of {', '.join(SPACES)}")
    return space


@dataclass
class WeightedEnsemble(Combination):
    """Weighted ensemble, r = Σ w_i p_i (Fu et al. 2025, §3.1, eq. 2). Weights are never replaced."""

    weights: Sequence[float] = (0.5, 0.5)

    def __post_init__(self) -> None:
        self.space = "probs"
        w = [float(x) for x in self.weights]
        if len(w) != self.n_members:
            raise ValueError(f"weighted ensemble: {len(w)} weights for {self.n_members} members; give one per member")
        if any(x < 0 for x in w):
            raise ValueError(f"weighted ensemble: weights must be >= 0, got {w}")
        if abs(sum(w) - 1.0) > 1e-6:
            raise ValueError(f"weighted ensemble: weights must sum to 1, got {w} (sum {sum(w):g})")
        self.weights = tuple(w)

    @classmethod
    def two_member(cls, lam: float) -> "WeightedEnsemble":
        """The reference code's form: r = (1-λ) p_model + λ p_extra."""
        if not 0.0 <= lam <= 1.0:
            raise ValueError(f"lambda must be in [0, 1], got {lam}")
        return cls(n_members=2, weights=(1.0 - lam, lam))

    def combine(self, values: Sequence[torch.Tensor]) -> torch.Tensor:
        return sum(w * p for w, p in zip(self.weights, values))

    def proposal(self, member_logits: Sequence[torch.Tensor | None], params: SamplingParams) -> torch.Tensor:
        """The given members' part of r, renormalised: q = Σ_G w_i p_i / W_G. Then r ≥ W_G q everywhere, so
        a draw from q is accepted with probability at least W_G (one member: its own p_i)."""
        given = [(w, l) for w, l in zip(self.weights, member_logits) if l is not None]
        total = sum(w for w, _ in given)
        if len(given) == 1 or total == 0:
            return super().proposal(member_logits, params)
        return sum(w * to_probs(l, params) for w, l in given) / total


@dataclass
class Mean(WeightedEnsemble):
    """Plain mean of n members' distributions, r = (1/n) Σ p_i."""

    def __post_init__(self) -> None:
        self.weights = tuple([1.0 / self.n_members] * self.n_members)
        super().__post_init__()


@dataclass
class Contrastive(Combination):
    """Contrastive decoding, s = l_expert - α l_amateur (Li et al. 2023; Fu et al. 2025 §3.1).

    Members in config order [expert, amateur]. `plausibility` β > 0 applies the O'Brien & Lewis cut:
    tokens with p_expert < β · max p_expert get -inf (off by default, as in the paper's settings).
    """

    alpha: float = 0.1
    plausibility: float = 0.0

    def __post_init__(self) -> None:
        self.space = "raw-logits"
        if self.n_members != 2:
            raise ValueError(f"contrastive decoding takes 2 members [expert, amateur], got {self.n_members}")
        if self.alpha < 0:
            raise ValueError(f"contrastive alpha must be >= 0, got {self.alpha}")
        if not 0.0 <= self.plausibility < 1.0:
            raise ValueError(f"plausibility must be in [0, 1), got {self.plausibility}")

    def combine(self, values: Sequence[torch.Tensor]) -> torch.Tensor:
        expert, amateur = values
        s = expert - self.alpha * amateur
        if self.plausibility > 0:
            logp = expert.log_softmax(-1)
            cut = logp < logp.max(-1, keepdim=True).values + torch.log(torch.tensor(self.plausibility))
            s = s.masked_fill(cut, float("-inf"))
        return s


@dataclass
class ProxyTuning(Combination):
    """Proxy-tuning, l_base + l_tuned - l_untuned (Liu et al. 2024). Order [base, tuned, untuned]."""

    def __post_init__(self) -> None:
        self.space = "raw-logits"
        if self.n_members != 3:
            raise ValueError(f"proxy-tuning takes 3 members [base, tuned, untuned], got {self.n_members}")

    def combine(self, values: Sequence[torch.Tensor]) -> torch.Tensor:
        base, tuned, untuned = values
        return base + tuned - untuned


@dataclass
class Realignment(Combination):
    """Decoding-time realignment, l_ref + λ (l_aligned - l_ref) (Liu et al. 2024). Order [ref, aligned]."""

    lam: float = 1.0

    def __post_init__(self) -> None:
        self.space = "raw-logits"
        if self.n_members != 2:
            raise ValueError(f"realignment takes 2 members [ref, aligned], got {self.n_members}")

    def combine(self, values: Sequence[torch.Tensor]) -> torch.Tensor:
        ref, aligned = values
        return ref + self.lam * (aligned - ref)


@dataclass
class Custom(Combination):
    """Any callable f([v_model, v_extra_1, ...], **kwargs) -> tensor, in its declared space.

    In `probs` space f returns (unnormalised) probabilities; otherwise it returns logits.
    """

    fn: Callable[..., torch.Tensor] | None = None
    declared_space: str = "logits"
    kwargs: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.space = _check_space(self.declared_space)
        if not callable(self.fn):
            raise ValueError(f"custom combination needs a callable, got {self.fn!r}")

    def combine(self, values: Sequence[torch.Tensor]) -> torch.Tensor:
        return self.fn(list(values), **self.kwargs)

    def describe(self) -> str:
        name = f"{getattr(self.fn, '__module__', '?')}:{getattr(self.fn, '__qualname__', repr(self.fn))}"
        return f"custom combination {name} ({self.space} space)"


def import_callable(target: str) -> Callable[..., torch.Tensor]:
    """'package.module:function' or 'package.module.function' -> the callable, with a clear error."""
    module_name, _, attr = target.partition(":") if ":" in target else target.rpartition(".")
    if not module_name or not attr:
        raise ValueError(f"combination target {target!r} must look like 'package.module:function'")
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"cannot import combination {target!r}: {e}") from e
    if not callable(fn):
        raise ValueError(f"combination target {target!r} is not callable")
    return fn


class Single(WeightedEnsemble):
    """One member alone (large_model, sd): r = p_target."""

    def __init__(self) -> None:
        super().__init__(n_members=1, weights=(1.0,))
