"""Teacher-forced log r: the log-probability the combined distribution gives a continuation.

Each member in r forwards context + continuation once (teacher forcing). At every continuation
position the method's Combination turns the members' logits into r, which is normalised per position in
every space (Combination.distribution), so log r(continuation | context) = Σ_t log r_t(x_t) is the
log-probability of the continuation under the token-by-token process every method samples from (the
accelerated ones emit exactly r). It is therefore defined for every method and combination; a token r
gives probability 0 (a plausibility cut, or top_k / top_p set in model_args) scores -inf.

r is processed with the model_args' temperature / top_k / top_p (temperature 0 counts as 1, as in
sampling.py): the r the engine samples from with those settings; with none set, the plain r.
Requests that share a context reuse the members' KV caches (multiple choice feeds its context once).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..combination import Combination
from ..engine import Engine
from ..sampling import SamplingParams


def continuation_logprob(member_logits: Sequence[torch.Tensor], combination: Combination, params: SamplingParams,
                         targets: torch.Tensor) -> tuple[float, bool]:
    """(Σ log r_t(x_t), every x_t == argmax r_t) from each member's logits [n, V] at the positions that
    predict the n continuation tokens `targets` [n]."""
    r = combination.distribution(member_logits, params)  # [n, V], float32, each row sums to 1
    assert r.shape[0] == targets.shape[0], (r.shape, targets.shape)
    log_r = r.log().gather(-1, targets[:, None]).squeeze(-1)  # [n]
    return float(log_r.sum()), bool((r.argmax(-1) == targets).all())


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class ContinuationScorer:
    """log r of continuations, one request at a time, on an engine's members."""

    def __init__(self, engine: Engine, params: SamplingParams) -> None:
        self.engine = engine
        self.params = params
        self.fed: list[int] = []  # tokens the members' caches hold (a prefix of the last input)

    def start(self) -> None:
        """Before a batch of requests: a generation may have filled the caches since; start empty."""
        for m in self.engine.combined_members:
            m.threads = self.engine.threads
            m.reset()
        self.fed = []

    def __call__(self, ids: Sequence[int], n: int) -> tuple[float, bool]:
        """Score the last n of `ids` given the tokens before them (at least one)."""
        assert 1 <= n < len(ids), (n, len(ids))
        inputs = list(ids[:-1])  # the logits at the last n inputs predict the n continuation tokens
        keep = common_prefix(self.fed, inputs)
        seq = torch.tensor(inputs, dtype=torch.long)
        logits = []
        for m in self.engine.combined_members:
            m.rollback(keep)  # the caches now hold a prefix of `inputs`; score feeds the rest
            logits.append(m.score(seq, n).to(self.engine.device))
        self.fed = inputs
        targets = torch.tensor(list(ids[-n:]), dtype=torch.long, device=self.engine.device)
        return continuation_logprob(logits, self.engine.plan.combination, self.params, targets)
