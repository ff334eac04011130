"""`we_mix_sd` under the adaptive schedule: mixture rounds or CoS episodes, whichever measures faster.

Wherever nothing is pending (after every mixture round; after a CoS round that ended its chain, by a
rejection or a dropped chain) the kind of what comes next is chosen from the past alone
(round_kinds.KindChoice). A mixture round draws fresh coins and drops the ones it read but did not
emit; a CoS episode starts from the committed tokens with empty state, its default proposer the
mixture's. Each emits r exactly from any prefix, so the output keeps r; docs/mixture_sampling.md has
the argument and tests/test_mix.py the Monte Carlo check, with a control whose choice peeks at the
coins and fails it.
"""

from __future__ import annotations

import time

from ..round_kinds import WARM_ROUNDS, KindChoice
from ..schedule import Schedule
from .alternate import AlternateLoop
from .mixture import MixtureLoop
from .state import DecodeState


class HybridLoop:
    def __init__(self, st: DecodeState, mixture: MixtureLoop, alternate: AlternateLoop, kinds: KindChoice) -> None:
        self.st = st
        self.kinds = kinds
        self.loops = {"mixture": mixture, "cos": alternate}
        self.schedules: dict[str, Schedule] = {"mixture": mixture.schedule, "cos": alternate.schedule}
        self.kind: str | None = None  # the kind running; None: nothing pending, the next is chosen

    def _next_kind(self) -> str:
        return self.kinds.choose()

    def round(self) -> list[int]:
        if self.kind is None:
            self.kind = self._next_kind()
        kind, st = self.kind, self.st
        started = time.perf_counter()
        emitted = self.loops[kind].round()
        warm = self.schedules[kind].rounds > WARM_ROUNDS
        self.kinds.observe(kind, len(emitted), time.perf_counter() - started, warm)
        if kind == "mixture" or self.loops["cos"].idle:
            self.kind = None
            for m in st.all_models():  # nothing pending: no cache holds more than the committed tokens
                m.rollback(st.seq.shape[0])
        return emitted
