"""Standard collaborative decoding (`we`, `cd`, `large_model`): every member forwards every step."""

from __future__ import annotations

from ..sampling import pick
from .state import DecodeState


def standard_round(st: DecodeState) -> list[int]:
    # 1. every member scores the next position (one token each, from its own cache)
    logits = [m.score(st.seq, 1) for m in st.members]  # n × [1, V]
    # 2. sample from r (argmax under greedy decoding)
    token = pick(st.r(logits), st.params.greedy, st.generator)  # [1]
    # 3. commit (the one host sync of the round)
    return st.commit(token.tolist(), keep_cached=st.seq.shape[0])


def fallback_round(st: DecodeState) -> list[int]:
    """A standard round inside a drafting loop, where its schedule chose to draft nothing (k = 0)."""
    st.stats.standard_rounds += 1
    return standard_round(st)
