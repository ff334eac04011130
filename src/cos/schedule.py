"""How many tokens to draft before each round, or none: "never slower", made operational.

`fixed` keeps the paper's schedule: the proposer drafts γ every round (seed-deterministic; what the
reproduction grids use). `adaptive` chooses, before each round that starts a draft, the length k in
0..γ that maximises expected tokens per second under the cost model of docs/algorithm.md §6, with every
cost measured on this machine, now:
    k = 0 (a standard round):  1 token  for  Σ_m t_m(1)
    k ≥ 1 (a speculative one): (1 - α^(k+b)) / (1 - α) tokens  for  k·t_p(1) + Σ_v t_v(k+1)
t_m(n) is member m's moving-average seconds for a forward of n tokens (`CallCosts`), so a block
verify that costs more than one step (as bf16 on CPUs without native bf16 does) or a draft step that
slowed under load moves the choice; b = 1 where a full accept ends with a bonus token (sd, `bonus:
exact`, the alternate proposals of CoS), else 0; α is this generation's acceptance rate, shrunk
towards the previous generation's (or 0.5) by PRIOR_DRAFTS pseudo-drafts. CoS asks the same model,
after each bonus, how many more drafts its owner makes (`continuation`: the bonus is a draft made for
free), or whether to drop the chain for a standard round.

Exactness: the choice depends only on what happened before the round (timings, acceptances), never
on the round's own draws, and every length verifies its drafts against r the same way, so the
output keeps the distribution of r (greedy: the same tokens; tested). Timings differ between runs,
so under sampling a seed fixes the distribution, not the draw: use `fixed` for seed-reproducible text.

A loop with another model of a round passes its own `expectation(k, alphas)`, (expected tokens,
expected seconds) of a round (we_mix_sd: k = foreign positions drafted per round; cos/mixture.py), where
alphas[i] is the chance the (i+1)-th draft of a round is accepted once the i before it were (`alphas`:
counted per depth, each shrunk towards the depth before it, so a depth never reached reads as the one
above it). Pooling depths overrated long rounds: on we_mix_sd (MMLU, λ 0.3, pooled β ≈ 0.6) rounds of
m = 2 brought 2.8-2.9 tokens where the pooled β promised 3.0-3.3 (m = 1: 2.5, as promised), and m = 2
ran in a third of one run's rounds at 0.83x the rate of m = 1.
Such a loop reports each round's measured seconds beside what the model prices that very round at
(`observe_seconds`: the calls its block made, not the expectation over blocks, so a round that drew a
long block by chance does not read as a slow one). The schedule divides the modelled seconds of k by
its measured / priced ratio (decayed sums per k, shrunk towards the ratio over all rounds): what the
model does not see (Python and sampling per round, a catch-up priced off a length never measured, a
CPU whose forwards grow with the tokens fed) is then paid for in the choice. Measured on we_mix_sd,
bf16 through torch's GEMM on a 2-core AVX2 CPU: modelled 0.30 s for rounds of m = 0 that took 0.51.

The first rounds measure the plan (γ), a standard round (0) and the shortest draft (1); after that
each PROBE_EVERY-th round runs a neighbour of the current choice (k ± 1, the one measured longer ago),
so a choice made under one load is revisited when the load or α changes, one step at a time, and a
probe never pays for a far-off length (probes of m = 2..5 cost we_mix_sd 4% of a run where m = 0 won).
A loop with its own model probes a neighbour only while its calibrated rate is within PROBE_MARGIN
of the best's (`_contender`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .costs import CallCosts

SCHEDULES = ("fixed", "adaptive")
Expectation = Callable[[int, Sequence[float]], "tuple[float, float] | None"]  # (k, α per depth) -> (tokens, seconds)
PRIOR_DRAFTS = 4.0
PROBE_EVERY = 16
CALIBRATION_DECAY = 0.9  # weight kept by older rounds in the measured / modelled seconds sums
PRIOR_ROUNDS = 2.0  # pseudo-rounds at the ratio over all rounds, for a k measured a few times only
PROBE_MARGIN = 0.1  # a loop with its own model probes a neighbour only within this of the best's rate


def expected_tokens(alpha: float, k: int, bonus: int) -> float:
    """Tokens per round of k drafts: accepted prefix + (residual or bonus), §6 with independent α."""
    n = k + bonus
    return float(n) if alpha >= 1.0 else (1 - alpha**n) / (1 - alpha)


def fastest(gamma: int, rate: Callable[[int], float]) -> int:
    """argmax over k in 0..γ of rate(k), expected tokens per second; ties keep the shorter."""
    best, best_rate = 0, rate(0)
    for k in range(1, gamma + 1):
        value = rate(k)
        if value > best_rate:
            best, best_rate = k, value
    return best


def best_length(alpha: float, gamma: int, bonus: int, draft_step: float, verify: Callable[[int], float],
                standard: float, free: int = 0) -> int:
    """argmax over k in 0..γ of tokens per second (0 = a standard round); ties keep the shorter.

    draft_step: t_p(1); verify(n): Σ_v t_v(n); standard: Σ_m t_m(1); free: drafts already made (CoS's
    pending bonus: a chain of k then costs k - 1 draft steps).
    """
    return fastest(gamma, lambda k: 1.0 / standard if k == 0 else
                   expected_tokens(alpha, k, bonus) / ((k - free) * draft_step + verify(k + 1)))


class Schedule:
    """Per engine: `length(...)` before a round; `observe(drafted, accepted)` after it."""

    def __init__(self, kind: str, gamma: int, bonus: int) -> None:
        if kind not in SCHEDULES:
            raise ValueError(f"unknown schedule {kind!r}: use one of {', '.join(SCHEDULES)}")
        self.kind, self.gamma, self.bonus = kind, gamma, bonus
        self.prior = 0.5
        self.rounds = 0  # over the engine's life: probes and first measurements are not repeated per request
        self.last_run: dict[int, int] = {}  # k -> the round it last ran in
        self.seconds_sums: dict[int | None, list[float]] = {}  # k (None: all) -> [measured, modelled, rounds]
        self.start()

    def start(self) -> None:
        """A new generation: acceptance counts restart, shrunk towards the last generation's rate."""
        self.drafted = self.accepted = 0
        self.tested = 0  # drafts whose verdict was seen: the accepted, and each round's first rejected
        self.depths = [[0.0, 0] for _ in range(self.gamma)]  # per depth in a round: [accepted, tested]
        self.chosen: dict[int, int] = {}  # k -> rounds this generation, for the statistics

    def finish(self) -> None:
        if self.tested:
            self.prior = self.alpha

    @property
    def alpha(self) -> float:
        """Per-draft acceptance, the α of the §6 model: accepted / tested. A round stops at its first
        rejection, so the drafts after it were never tested; counting them (accepted / drafted) reads
        β = 0.9 at γ = 5 as 0.74, and the adaptive schedule then drafts too little."""
        return (self.accepted + PRIOR_DRAFTS * self.prior) / (self.tested + PRIOR_DRAFTS)

    def alphas(self) -> list[float]:
        """α by depth: alphas[i] = the chance the (i+1)-th draft of a round is accepted given the i before
        it were, shrunk by PRIOR_DRAFTS pseudo-drafts towards depth i - 1 (depth 0: towards the previous
        generation's α, as `alpha`), so depths seldom reached read as the depth above them."""
        out, anchor = [], self.prior
        for accepted, tested in self.depths:
            anchor = (accepted + PRIOR_DRAFTS * anchor) / (tested + PRIOR_DRAFTS)
            out.append(anchor)
        return out

    def length(self, proposer: CallCosts, verifiers: Sequence[CallCosts], proposer_in_r: bool,
               expectation: Expectation | None = None) -> int:
        """Drafts for the next round (0 = a standard round). proposer_in_r: the proposer is a member of
        the combination (a standard round runs it too), not a draft model beside it (sd).
        expectation(k, α): a loop's own (expected tokens, expected seconds) of a round of k (None while
        unmeasured), in place of the draft-length model above (we_mix_sd: k = foreign positions
        drafted, cos/mixture.py); its seconds are calibrated by what such rounds measured."""
        k = self.gamma if self.kind == "fixed" else self._adaptive(proposer, verifiers, proposer_in_r, expectation)
        self.rounds += 1
        self.last_run[k] = self.rounds
        self.chosen[k] = self.chosen.get(k, 0) + 1
        return k

    def _adaptive(self, proposer: CallCosts, verifiers: Sequence[CallCosts], proposer_in_r: bool,
                  expectation: Expectation | None = None) -> int:
        for k in (self.gamma, 0, 1):  # first measure the plan, a standard round and the shortest draft
            if k not in self.last_run:
                return k
        best = self._best(proposer, verifiers, proposer_in_r, expectation)
        if self.rounds % PROBE_EVERY == PROBE_EVERY - 1:  # revisit a neighbour, the one measured longer ago
            near = [k for k in (best - 1, best + 1) if 0 <= k <= self.gamma and self._contender(k, best, expectation)]
            return min(near, key=lambda k: self.last_run.get(k, 0)) if near else best
        return best

    def _contender(self, k: int, best: int, expectation: Expectation | None) -> bool:
        """Worth a probe: always for draft lengths (a probe is how t(k + 1) gets measured); for a loop
        with its own model, only within PROBE_MARGIN of the best's calibrated rate: its costs are
        measured per call and its α comes without probing (we_mix_sd: every ME step is β evidence),
        so a probe there only refreshes k's calibration, and where drafting foreign positions loses
        clearly (a CPU whose forwards grow with the tokens fed) a probe every 16 rounds cost 3%."""
        alphas = self.alphas()
        expected = None if expectation is None else (expectation(k, alphas), expectation(best, alphas))
        if expected is None or None in expected:
            return True
        return self._calibrated(expected[0], k) >= (1 - PROBE_MARGIN) * self._calibrated(expected[1], best)

    def _calibrated(self, expected: tuple[float, float], k: int) -> float:
        """Tokens per second of a round of k: its expected tokens over its calibrated expected seconds."""
        return expected[0] / (expected[1] * self.seconds_ratio(k))

    def _best(self, proposer: CallCosts, verifiers: Sequence[CallCosts], proposer_in_r: bool,
              expectation: Expectation | None, gamma: int | None = None, free: int = 0) -> int:
        gamma = self.gamma if gamma is None else gamma
        if expectation is not None:
            alphas = self.alphas()
            rounds = [expectation(k, alphas) for k in range(gamma + 1)]
            if None in rounds:
                return gamma
            return fastest(gamma, lambda k: self._calibrated(rounds[k], k))
        step = proposer(1)
        if step is None or any(v(1) is None for v in verifiers):
            return gamma
        standard = sum(v(1) for v in verifiers) + (step if proposer_in_r else 0.0)
        return best_length(self.alpha, gamma, self.bonus, step, lambda n: sum(v(n) for v in verifiers), standard,
                           free)

    def continuation(self, proposer: CallCosts, verifiers: Sequence[CallCosts], proposer_in_r: bool,
                     most: int) -> int | None:
        """CoS, after a member drew its bonus (one draft already pending, made for free): how many more
        it drafts (0..most), or None where a standard round beats every chain by the costs and α
        measured now (the pending proposals are then dropped). `most` under `fixed` and before the
        first measurements. Records nothing (methods/alternate.py step 4)."""
        if self.kind == "fixed" or any(k not in self.last_run for k in (self.gamma, 0, 1)):
            return most
        k = self._best(proposer, verifiers, proposer_in_r, None, gamma=most + 1, free=1)
        return None if k == 0 else k - 1

    def observe_seconds(self, k: int, measured: float, modelled: float) -> None:
        """A round of k took `measured` seconds where the loop's model priced its calls at `modelled`."""
        for key in (k, None):
            sums = self.seconds_sums.setdefault(key, [0.0, 0.0, 0.0])
            for i, value in enumerate((measured, modelled, 1.0)):
                sums[i] = CALIBRATION_DECAY * sums[i] + value

    def seconds_ratio(self, k: int) -> float:
        """Measured / modelled seconds of rounds of k, shrunk towards the ratio over all rounds by
        PRIOR_ROUNDS pseudo-rounds (1 before any round was reported)."""
        pooled = self.seconds_sums.get(None)
        if pooled is None or pooled[1] <= 0:
            return 1.0
        measured, modelled, _ = self.seconds_sums.get(k, (0.0, 0.0, 0.0))
        prior = PRIOR_ROUNDS * pooled[1] / pooled[2]  # modelled seconds of that many typical rounds
        return (measured + prior * pooled[0] / pooled[1]) / (modelled + prior)

    def observe(self, drafted: int, accepted: int) -> None:
        self.drafted += drafted
        self.accepted += accepted
        self.tested += accepted + (accepted < drafted)
        for depth in self.depths[:min(accepted + 1, drafted)]:  # accepted up to `accepted`, then the rejected
            depth[1] += 1
        for depth in self.depths[:accepted]:
            depth[0] += 1

    def observe_chance(self, chance: float) -> None:
        """Evidence without a draft: the chance a draft would have been accepted at a position, counted
        as one tested draft at depth 0 (we_mix_sd: Σ min(p_s, p_k) where member k emitted its own
        position, after the proposer's own positions: where a round's first foreign draft would be)."""
        self.accepted += chance
        self.tested += 1
        if self.depths:
            self.depths[0][0] += chance
            self.depths[0][1] += 1
