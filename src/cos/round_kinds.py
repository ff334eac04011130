"""A measured choice between kinds of round, made wherever nothing is pending (methods/kinds.py).

Used by `we_mix_sd` under the adaptive schedule (mixture rounds, coins first, cos/mixture.py; or CoS
episodes, alternate proposals against r, methods/alternate.py) and by `tree: auto` (a chain round, its
length from the adaptive schedule; or a tree round of a fixed shape, methods/tree.py). Each kind emits r
exactly from any prefix where nothing is pending, and the choice is a function of the past (the tokens
and seconds each kind measured), so the output keeps r (proof sketch: docs/mixture_sampling.md, "CoS
episodes between the mixture rounds"; the same argument for trees). The choice is measured, not
modelled: each kind's tokens and seconds, decayed per round, over its rounds after its first
WARM_ROUNDS (a schedule's first rounds run lengths picked for measuring, and a first call pays for
compiling). The kind measured slower runs again once PROBE_EVERY rounds of the others have passed, so a
choice made on one stretch of text or under one load is revisited.

Why: where members disagree, ME's mixture rounds draft nothing foreign (MMLU, λ 0.3: CoS 1.42x `we`,
the mixture rounds 1.78x); where they agree, CoS chains run long (HumanEval, λ 0.5, α 0.93: CoS 2.05x,
the mixture rounds 2.00x). A tree pays where a verify pass of its rows costs about one of a chain's
(on an AVX2 CPU it does not: trees ran 0.86-0.94x the chain there).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .schedule import PROBE_EVERY, Schedule

DECAY = 0.9  # weight kept by a kind's older rounds in its measured tokens and seconds
WARM_ROUNDS = 4  # a kind's first rounds over the engine's life are not counted (measurement lengths, compiling)


class KindChoice:
    """Kept across requests (an engine's, beside its schedule): `choose()` where nothing is pending,
    `observe(...)` after every round."""

    def __init__(self, kinds: Sequence[str], schedules: Mapping[str, Schedule] | None = None) -> None:
        """kinds: in order of preference on a tie, and of first measurement. schedules: the draft
        lengths of a kind that has its own (we_mix_sd's CoS episodes), started and finished with this."""
        self.kinds = tuple(kinds)
        self.schedules = dict(schedules or {})
        self.sums = {kind: [0.0, 0.0] for kind in kinds}  # decayed [tokens, seconds] of warm rounds
        self.rounds = 0  # over the engine's life
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
        tokens, seconds = self.sums[kind]
        return tokens / seconds if seconds > 0 else None

    def choose(self) -> str:
        """The kind of the next round (or episode): each kind until measured, then the fastest, with the
        one measured longest ago revisited once PROBE_EVERY rounds have passed without it."""
        rates = {kind: self.rate(kind) for kind in self.kinds}
        unmeasured = [kind for kind in self.kinds if rates[kind] is None]
        if unmeasured:
            return unmeasured[0]
        stale = min(self.kinds, key=self.last_run.__getitem__)
        if self.rounds - self.last_run[stale] >= PROBE_EVERY:
            return stale
        return max(self.kinds, key=rates.__getitem__)  # a tie keeps the earlier kind

    def observe(self, kind: str, tokens: int, seconds: float) -> None:
        """A round of `kind` emitted `tokens` in `seconds`."""
        self.rounds += 1
        self.runs[kind] += 1
        self.last_run[kind] = self.rounds
        self.chosen[kind] += 1
        if self.runs[kind] > WARM_ROUNDS:
            sums = self.sums[kind]
            sums[0] = DECAY * sums[0] + tokens
            sums[1] = DECAY * sums[1] + seconds
