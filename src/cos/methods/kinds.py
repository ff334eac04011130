"""Rounds of several kinds, whichever measures faster (round_kinds.KindChoice): `we_mix_sd` under the
adaptive schedule (mixture rounds or CoS episodes) and `tree: auto` (chain rounds or tree rounds).

Wherever nothing is pending (the running kind's loop is `idle`: after every mixture round, sd round or
tree round that left nothing to carry; after a CoS round that ended its chain, by a rejection or a
dropped chain) the kind of what comes next is chosen from the past alone, and every cache is rolled
back to the committed tokens. Each loop emits r exactly from any such point (a mixture round draws
fresh coins and drops the ones it read but did not emit), so the output keeps r: docs/mixture_sampling.md
has the argument, tests/test_mix.py and tests/test_tree*.py the checks, with a control whose choice
peeks at the coins and fails.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Protocol

from ..round_kinds import KindChoice
from .state import DecodeState


class Loop(Protocol):
    idle: bool  # nothing pending: the next round may be of another kind

    def round(self) -> list[int]: ...


class KindsLoop:
    def __init__(self, st: DecodeState, loops: Mapping[str, Loop], kinds: KindChoice) -> None:
        self.st = st
        self.loops = dict(loops)
        self.kinds = kinds
        self.kind: str | None = None  # the kind running; None: nothing pending, the next is chosen

    def _next_kind(self) -> str:
        return self.kinds.choose()

    def round(self) -> list[int]:
        if self.kind is None:
            self.kind = self._next_kind()
        kind, st = self.kind, self.st
        started = time.perf_counter()
        emitted = self.loops[kind].round()
        self.kinds.observe(kind, len(emitted), time.perf_counter() - started)
        if self.loops[kind].idle:
            self.kind = None
            for m in st.all_models():  # nothing pending: no cache holds more than the committed tokens
                m.rollback(st.seq.shape[0])
        return emitted
