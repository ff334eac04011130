"""Byte-level generation without an engine: the naive reference (every member at every byte) and speculation
with one drafting member, on members already built (rounds.py has the rounds and the loop; engine.py the
entry point that loads members, chooses rounds by measure and keeps statistics)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..combination import Combination
from ..sampling import SamplingParams
from .member import ByteMember
from .rounds import NAIVE, DraftLengths, decode, draft_kind
from .stopping import ByteStopper


@dataclass
class ByteGeneration:
    data: bytes
    ended: bool  # END was emitted (else max_bytes stopped it)
    rounds: int = 0  # steps of every member (naive: one per symbol; speculative: one per draft)

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


def start_all(members: Sequence[ByteMember], combination: Combination, prompts: Sequence[Sequence[int]]) -> None:
    """Check one prompt per member and one member per combination argument, then start every member."""
    if len(members) != combination.n_members or len(prompts) != len(members):
        raise ValueError(f"{len(members)} byte-level members and {len(prompts)} prompts for a combination of "
                         f"{combination.n_members}: give one of each per member")
    for member, prompt in zip(members, prompts):
        member.start(prompt)


def generate_naive(members: Sequence[ByteMember], combination: Combination, prompts: Sequence[Sequence[int]],
                   max_bytes: int, params: SamplingParams = SamplingParams(), seed: int = 0) -> ByteGeneration:
    """prompts: each member's token ids for the prompt, in its own tokenizer (config order)."""
    start_all(members, combination, prompts)
    stopper = ByteStopper(max_bytes)
    counts = decode(members, combination, stopper, params, torch.Generator().manual_seed(seed), [NAIVE], DraftLengths())
    return ByteGeneration(stopper.output(), stopper.reason == "eos", counts.rounds)


def generate_speculative(members: Sequence[ByteMember], combination: Combination, prompts: Sequence[Sequence[int]],
                         max_bytes: int, params: SamplingParams = SamplingParams(), seed: int = 0,
                         drafter: int = 0, draft_bytes: int = 12, adaptive: bool = True) -> ByteGeneration:
    """prompts: each member's token ids for the prompt (config order); drafter: the index of the member
    that drafts every round; draft_bytes: symbols drafted per round, at most (adaptive: twice the bytes
    recent rounds accepted, at least 2; a function of past rounds only, so exactness holds)."""
    if not 0 <= drafter < len(members):
        raise ValueError(f"drafter {drafter} is not a member index (0..{len(members) - 1})")
    lengths = DraftLengths(draft_bytes, adaptive)
    start_all(members, combination, prompts)
    stopper = ByteStopper(max_bytes)
    counts = decode(members, combination, stopper, params, torch.Generator().manual_seed(seed), [draft_kind(drafter)],
                    lengths)
    return ByteGeneration(stopper.output(), stopper.reason == "eos", counts.rounds)
