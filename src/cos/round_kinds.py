"""A measured choice between kinds of round, made wherever nothing is pending (methods/kinds.py).

Used by `we_mix_sd` under the adaptive schedule (mixture rounds, coins first, cos/mixture.py; or CoS
episodes, alternate proposals against r, methods/alternate.py) and by `tree: auto` (a chain round, its
length from the adaptive schedule; or a tree round of a fixed shape, methods/tree.py). Each kind emits r
exactly from any prefix where nothing is pending, and the choice is a function of the past (the tokens
and seconds each kind measured), so the output keeps r (proof sketch: docs/mixture_sampling.md, "CoS
episodes between the mixture rounds"; the same argument for trees). The choice is measured, not
modelled: each kind's tokens and seconds, decayed per round, over its rounds after its first
WARM_ROUNDS (a schedule's first rounds run lengths picked for measuring, and a first call pays for
compiling). A kind measured slower runs again, as a probe, so that a choice made on one stretch of text or
under one load is revisited: once PROBE_EVERY rounds of the others have passed, and no sooner than its
expected loss (its round's seconds x how far its rate trails the best's) is PROBE_COST of the seconds
since it last ran. A close loser is probed every PROBE_EVERY rounds; one far behind much more rarely (a
7-node tree round on an AVX2 CPU: 4x a chain round's seconds at 0.44x its rate, probed about every 75
chain rounds instead of every 16, which had cost auto 8% against the chain alone).

Why: where members disagree, ME's mixture rounds draft nothing foreign (MMLU, λ 0.3: CoS 1.42x `we`,
the mixture rounds 1.78x); where they agree, CoS chains run long (HumanEval, λ 0.5, α 0.93: CoS 2.05x,
the mixture rounds 2.00x). A tree pays where a verify pass of its rows costs about one of a chain's
(on an AVX2 CPU it does not: trees ran 0.86-0.94x the chain there).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .schedule import PROBE_EVERY, Schedule

DECAY = 0.9  # weight kept by a kind's older rounds in its measured tokens and seconds (a memory of ~10 rounds)
# chain | tree differ by what a verify row costs, not by the text: their rates are compared over ~50 rounds,
# or a chain's stretch of low acceptance reads slower than a tree rate measured on easier text long ago
TREE_DECAY = 0.98
WARM_ROUNDS = 4  # a kind's first rounds over the engine's life are not counted (measurement lengths, compiling)
PROBE_COST = 0.02  # a probe's expected loss, as a share of the seconds since the probed kind last ran


class KindChoice:
    """Kept across requests (an engine's, beside its schedule): `choose()` where nothing is pending,
    `observe(...)` after every round."""

    def __init__(self, kinds: Sequence[str], schedules: Mapping[str, Schedule] | None = None,
                 decay: float = DECAY, warm_rounds: int = WARM_ROUNDS) -> None:
        """kinds: in order of preference on a tie, and of first measurement. schedules: the draft
        lengths of a kind that has its own (we_mix_sd's CoS episodes), started and finished with this.
        warm_rounds: a kind's first rounds not counted (fewer where nothing is compiled or probed first)."""
        self.kinds = tuple(kinds)
        self.decay = decay
        self.warm_rounds = warm_rounds
        self.schedules = dict(schedules or {})
        self.sums = {kind: [0.0, 0.0, 0.0] for kind in kinds}  # decayed [tokens, seconds, rounds] of warm rounds
        self.rounds = 0  # over the engine's life
        self.clock = 0.0  # seconds of every round over the engine's life
        self.last_clock = {kind: 0.0 for kind in kinds}  # kind -> the clock when it last ran
        self.runs = {kind: 0 for kind in kinds}  # rounds of each kind over the engine's life
        self.last_run = {kind: 0 for kind in kinds}  # kind -> the round it last ran in
        self.start()

    def start(self) -> None:
        """A new generation: its counts restart (the measured rates carry over)."""
        self.chosen = {kind: 0 for kind in self.kinds}  # rounds of each kind this generation, for the statistics
        for schedule in self.schedules.values():
            schedule.start()

    def finish(self) -> None:
        for schedule in self.schedules.values():
            schedule.finish()

    def rate(self, kind: str) -> float | None:
        tokens, seconds, _ = self.sums[kind]
        return tokens / seconds if seconds > 0 else None

    def choose(self) -> str:
        """The kind of the next round (or episode): each kind until measured, then the fastest, with a
        slower kind probed once it is due (the one measured longest ago first)."""
        rates = {kind: self.rate(kind) for kind in self.kinds}
        unmeasured = [kind for kind in self.kinds if rates[kind] is None]
        if unmeasured:
            return unmeasured[0]
        best = max(self.kinds, key=rates.__getitem__)  # a tie keeps the earlier kind
        due = [kind for kind in self.kinds if kind != best and self._probe_due(kind, rates[kind] / rates[best])]
        return min(due, key=self.last_run.__getitem__) if due else best

    def _probe_due(self, kind: str, share: float) -> bool:
        """share: the kind's rate over the best's. Due after PROBE_EVERY rounds without it, and once its
        expected loss is at most PROBE_COST of the seconds since it ran."""
        _, seconds, rounds = self.sums[kind]
        loss = seconds / rounds * (1.0 - share)  # seconds a round of it costs beyond its tokens at the best rate
        return (self.rounds - self.last_run[kind] >= PROBE_EVERY
                and PROBE_COST * (self.clock - self.last_clock[kind]) >= loss)

    def observe(self, kind: str, tokens: int, seconds: float) -> None:
        """A round of `kind` emitted `tokens` in `seconds`."""
        self.rounds += 1
        self.clock += seconds
        self.runs[kind] += 1
        self.last_run[kind] = self.rounds
        self.last_clock[kind] = self.clock
        self.chosen[kind] += 1
        if self.runs[kind] > self.warm_rounds:
            sums = self.sums[kind]
            for i, value in enumerate((tokens, seconds, 1.0)):
                sums[i] = self.decay * sums[i] + value
