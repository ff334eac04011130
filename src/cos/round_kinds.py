"""The hybrid's choice of round kind, made wherever nothing is pending: a mixture round (coins first,
cos/mixture.py) or a CoS episode (alternate proposals verified against r, methods/alternate.py, run
until a rejection or a dropped chain leaves nothing pending).

Each kind emits r exactly from any prefix, and the choice is a function of the past (tokens/s that
each kind measured), so the output keeps r (proof sketch: docs/mixture_sampling.md). The choice is
measured, not modelled: each kind's tokens and seconds, decayed per round, over rounds after its
schedule's first measurements (those run lengths picked for measuring, not for speed). The kind measured
slower runs again once PROBE_EVERY rounds of the other have passed, so a choice made on one
stretch of text or under one load is revisited.

Why both: ME's mixture rounds draft nothing foreign where members disagree (MMLU, λ 0.3: CoS 1.42x
`we`, the mixture rounds 1.78x), CoS chains run long where they agree (HumanEval, λ 0.5, α 0.93: CoS
2.05x, the mixture rounds 2.00x).
"""

from __future__ import annotations

from .schedule import PROBE_EVERY, Schedule

KINDS = ("mixture", "cos")
DECAY = 0.9  # weight kept by a kind's older rounds in its measured tokens and seconds
WARM_ROUNDS = 3  # a schedule's first rounds measure γ, 0 and 1 (schedule.py): not counted here


class KindChoice:
    """Kept across requests (an engine's, beside its schedule): `choose()` where nothing is pending,
    `observe(...)` after every round."""

    def __init__(self, alternate: Schedule) -> None:
        self.alternate = alternate  # the CoS episodes' draft lengths: a chain's k, α against r
        self.sums = {kind: [0.0, 0.0] for kind in KINDS}  # decayed [tokens, seconds] of warm rounds
        self.rounds = 0  # over the engine's life
        self.last_run = {kind: 0 for kind in KINDS}  # kind -> the round it last ran in
        self.start()

    def start(self) -> None:
        """A new generation: its counts restart (the measured rates carry over)."""
        self.chosen = {kind: 0 for kind in KINDS}  # rounds of each kind this generation, for the statistics
        self.alternate.start()

    def finish(self) -> None:
        self.alternate.finish()

    def rate(self, kind: str) -> float | None:
        tokens, seconds = self.sums[kind]
        return tokens / seconds if seconds > 0 else None

    def choose(self) -> str:
        """The kind of the next round (or episode): each kind until measured, then the faster, with
        the slower revisited every PROBE_EVERY rounds."""
        rates = {kind: self.rate(kind) for kind in KINDS}
        unmeasured = [kind for kind in KINDS if rates[kind] is None]
        if unmeasured:
            return unmeasured[0]
        best = max(KINDS, key=rates.__getitem__)  # a tie keeps the mixture rounds
        other = next(kind for kind in KINDS if kind != best)
        return other if self.rounds - self.last_run[other] >= PROBE_EVERY else best

    def observe(self, kind: str, tokens: int, seconds: float, warm: bool) -> None:
        """A round of `kind` emitted `tokens` in `seconds`; warm: its schedule is past its first measurements."""
        self.rounds += 1
        self.last_run[kind] = self.rounds
        self.chosen[kind] += 1
        if warm:
            sums = self.sums[kind]
            sums[0] = DECAY * sums[0] + tokens
            sums[1] = DECAY * sums[1] + seconds
