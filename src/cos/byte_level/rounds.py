"""The two kinds of round over bytes, each exact from any text so far, and the one loop that runs them.

- `naive_round`: one symbol from r (every member's byte law at the text's end): the reference.
- `speculative_round`: one member drafts bytes in its own tokens (ByteMember.draft: a token of several bytes
  for one forward), every member's laws along the draft come in one forward per token level
  (ByteMember.laws_along), r at every position is the `Combination` of those laws as in the naive round, and
  the one acceptance rule (acceptance.verify_block over the 257 symbols, q the drafter's laws) accepts a
  prefix and emits a residual or bonus symbol. The draft's length is fixed in bytes (or ends at END), never
  at a token boundary: where tokens end is not a function of the bytes, and a length that depends on the
  hidden tokenization would bias the accepted bytes.

`decode` runs rounds until the stopper ends the text: the kind of each round (naive, or a draft by member
i) and a draft's length are chosen from past rounds only (a `KindChoice` by measured bytes per second, the
accepted bytes of a drafter's recent rounds), so the text is distributed as the naive reference's (greedy:
identical to it), whatever was chosen.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from ..acceptance import NO_TOKEN, verify_block
from ..combination import Combination
from ..round_kinds import KindChoice
from ..sampling import SamplingParams, pick
from .combined import combined_law, combined_rows
from .member import ByteMember
from .stopping import ByteStopper

NAIVE = "naive"


def drafting(kind: str) -> int | None:
    """The drafting member of a kind of round ("draft:i"), None for the naive round."""
    return None if kind == NAIVE else int(kind.split(":")[1])


def draft_kind(i: int) -> str:
    return f"draft:{i}"


@dataclass
class RoundResult:
    symbols: list[int]  # emitted, in order (a stopper may take fewer)
    drafted: int = 0  # symbols verified against r
    accepted: int = 0


def naive_round(members: Sequence[ByteMember], combination: Combination, params: SamplingParams,
                generator: torch.Generator | None) -> RoundResult:
    return RoundResult([int(pick(combined_law(members, combination, params), params.greedy, generator))])


def speculative_round(members: Sequence[ByteMember], combination: Combination, params: SamplingParams,
                      generator: torch.Generator | None, drafter: int, length: int) -> RoundResult:
    draft = members[drafter].draft(length, params.greedy, generator)
    laws = [m.laws_along(draft) for m in members]
    # a member's laws stop at END or at a symbol it gives 0 (pruned): the block ends with that symbol,
    # verified like the others, with no bonus row (a stop decided by a symbol never skips its check)
    rows = min(len(law) for law in laws)
    n = min(rows, len(draft))
    r = combined_rows(members, [law[:rows] for law in laws], combination, params)
    q = laws[drafter][:n].float()
    block = torch.tensor(draft[:n], dtype=torch.long)
    n_acc, nxt = (int(x) for x in verify_block(block, q, r, params.greedy, generator))
    return RoundResult(draft[:n_acc] + ([nxt] if nxt != NO_TOKEN else []), n, n_acc)


@dataclass
class DraftLengths:
    """A draft's length per drafter: at most `most` bytes; adaptive: twice the bytes its recent rounds
    accepted (a moving average), at least 2."""

    most: int = 12
    adaptive: bool = True
    accepted: dict[int, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.most < 1:
            raise ValueError(f"draft_bytes must be >= 1, got {self.most}")

    def length(self, drafter: int, room: int) -> int:
        mean = self.accepted.get(drafter, self.most / 2)
        wanted = min(self.most, max(2, round(2 * mean))) if self.adaptive else self.most
        return max(1, min(wanted, room))

    def observe(self, drafter: int, accepted: int) -> None:
        self.accepted[drafter] = 0.7 * self.accepted.get(drafter, self.most / 2) + 0.3 * accepted


@dataclass
class DecodeCounts:
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    kinds: dict[str, int] = field(default_factory=dict)  # rounds per kind


def decode(members: Sequence[ByteMember], combination: Combination, stopper: ByteStopper, params: SamplingParams,
           generator: torch.Generator | None, kinds: KindChoice | Sequence[str], lengths: DraftLengths) -> DecodeCounts:
    """Rounds until `stopper` ends the text (members started). kinds: a KindChoice (measured), or a fixed
    cycle of kinds (tests: "naive", "draft:0", ...). Under a measured choice a naive round is an episode of
    up to `lengths.most` naive steps, so that its rate is measured over as many bytes as a draft's (a naive
    step costs a forward where some tokenization ends and nearly nothing inside a token: over one byte its
    rate is noise)."""
    counts = DecodeCounts()
    measured = isinstance(kinds, KindChoice)
    while not stopper.done:
        kind = kinds.choose() if measured else kinds[counts.rounds % len(kinds)]
        drafter = drafting(kind)
        started = time.perf_counter()
        if drafter is None:
            taken = naive_episode(members, combination, stopper, params, generator, lengths.most if measured else 1)
        else:
            result = speculative_round(members, combination, params, generator, drafter,
                                       lengths.length(drafter, stopper.room))
            lengths.observe(drafter, result.accepted)
            taken = commit(members, stopper, result.symbols)
            counts.drafted += result.drafted
            counts.accepted += result.accepted
        if measured:
            kinds.observe(kind, taken, time.perf_counter() - started)
        counts.rounds += 1
        counts.kinds[kind] = counts.kinds.get(kind, 0) + 1
    return counts


def naive_episode(members: Sequence[ByteMember], combination: Combination, stopper: ByteStopper,
                  params: SamplingParams, generator: torch.Generator | None, steps: int) -> int:
    """Up to `steps` naive steps, each committed; how many symbols the stopper took."""
    taken = 0
    for _ in range(steps):
        taken += commit(members, stopper, naive_round(members, combination, params, generator).symbols)
        if stopper.done:
            break
    return taken


def commit(members: Sequence[ByteMember], stopper: ByteStopper, symbols: Sequence[int]) -> int:
    """Emit symbols one at a time until the stopper ends the text; how many it took. Members advance past
    every symbol but the last (nothing is asked of them after it)."""
    for i, symbol in enumerate(symbols):
        if stopper.commit(symbol):
            return i + 1
        for member in members:
            member.advance(symbol)
    return len(symbols)
