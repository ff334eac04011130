"""Collaborative decoding over bytes, the reference: every byte-level member at every byte.

r over the 257 symbols (256 byte values, END) is the project's `Combination` applied to the members'
byte-level laws as logits (their log-probabilities), in config order; the next symbol is argmax r
(greedy) or a draw from r. Members may have different tokenizers: each reads the prompt in its own.

A byte a member gives probability 0 is -inf in probability space (r gives it 0 too). In logit spaces
(contrastive, proxy-tuning) -inf - (-inf) has no value, so there a zero is read as the smallest
probability the member keeps, its `prune` fraction (a byte only pruning made impossible); with prune 0
no byte of a byte-level BPE vocabulary ever has probability 0 (every byte is a token of its own).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..combination import Combination
from ..sampling import SamplingParams, pick
from .member import ByteMember
from .vocabulary import END


@dataclass
class ByteGeneration:
    data: bytes
    ended: bool  # END was emitted (else max_bytes stopped it)
    rounds: int = 0  # steps of every member (naive: one per symbol; speculative: one per draft)

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


def combined_rows(laws: Sequence[torch.Tensor], combination: Combination, params: SamplingParams,
                  floors: Sequence[float] = ()) -> torch.Tensor:
    """r [m, 257] from the members' byte-level laws [m, 257] (config order). floors: the smallest
    probability each member keeps (its prune), read for a 0 in logit spaces (see above)."""
    logits = []
    for i, law in enumerate(laws):
        logp = law.log()
        if combination.space != "probs":
            floor = floors[i] if i < len(floors) and floors[i] > 0 else 0.0
            logp = logp.clamp(min=math.log(floor) if floor else -1e4)
        logits.append(logp.float())
    return combination.distribution(logits, params)


def combined_law(members: Sequence[ByteMember], combination: Combination, params: SamplingParams) -> torch.Tensor:
    """r [257] after the bytes so far."""
    return combined_rows([m.distribution()[None] for m in members], combination, params,
                         [m.prune for m in members])[0]


def generate_naive(members: Sequence[ByteMember], combination: Combination, prompts: Sequence[Sequence[int]],
                   max_bytes: int, params: SamplingParams = SamplingParams(), seed: int = 0) -> ByteGeneration:
    """prompts: each member's token ids for the prompt, in its own tokenizer (config order)."""
    if len(members) != combination.n_members or len(prompts) != len(members):
        raise ValueError(f"{len(members)} byte-level members and {len(prompts)} prompts for a combination of "
                         f"{combination.n_members}: give one of each per member")
    generator = torch.Generator().manual_seed(seed)
    for member, prompt in zip(members, prompts):
        member.start(prompt)
    out = bytearray()
    while len(out) < max_bytes:
        symbol = int(pick(combined_law(members, combination, params), params.greedy, generator))
        for member in members:
            member.advance(symbol)
        if symbol == END:
            return ByteGeneration(bytes(out), True, len(out) + 1)
        out.append(symbol)
    return ByteGeneration(bytes(out), False, len(out))
