"""Speculation over bytes: one member drafts bytes in its own tokens, every member's laws along the draft
come in one forward per token level, and the draft is verified byte by byte against r.

A round: the drafting member draws `draft_bytes` symbols from its own byte-level law (ByteMember.draft:
a cover of the text so far by weight, then tokens, so a token of several bytes costs one forward); each
member computes its laws along the draft (ByteMember.laws_along); r at every position is the
`Combination` of the members' laws, as in the naive reference (naive.py); the one acceptance rule
(acceptance.verify_block, over the 257 symbols, with q the drafter's laws) accepts a prefix and emits a
residual or bonus symbol. The draft's length is fixed in bytes (or ends at END), never at a token
boundary: where tokens end is not a function of the bytes, and a length that depends on the hidden
tokenization would bias the accepted bytes. So the emitted text is distributed as the naive reference's
(greedy: identical to it).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..acceptance import NO_TOKEN, verify_block
from ..combination import Combination
from ..sampling import SamplingParams
from .member import ByteMember
from .naive import ByteGeneration, combined_rows, start_all
from .vocabulary import END


def generate_speculative(members: Sequence[ByteMember], combination: Combination, prompts: Sequence[Sequence[int]],
                         max_bytes: int, params: SamplingParams = SamplingParams(), seed: int = 0,
                         drafter: int = 0, draft_bytes: int = 12, adaptive: bool = True) -> ByteGeneration:
    """prompts: each member's token ids for the prompt (config order); drafter: the index of the member
    that drafts; draft_bytes: symbols drafted per round, at most (adaptive: twice the bytes recent rounds
    accepted, at least 2; a function of past rounds only, so exactness holds)."""
    if not 0 <= drafter < len(members):
        raise ValueError(f"drafter {drafter} is not a member index (0..{len(members) - 1})")
    if draft_bytes < 1:
        raise ValueError(f"draft_bytes must be >= 1, got {draft_bytes}")
    start_all(members, combination, prompts)
    generator = torch.Generator().manual_seed(seed)
    out, rounds, accepted = bytearray(), 0, draft_bytes / 2  # accepted: a moving average per round
    while len(out) < max_bytes:
        length = min(draft_bytes, max(2, round(2 * accepted))) if adaptive else draft_bytes
        draft = members[drafter].draft(min(length, max_bytes - len(out)), params.greedy, generator)
        laws = [m.laws_along(draft) for m in members]
        # a member's laws stop at END or at a symbol it gives 0 (pruned): the block ends with that symbol,
        # verified like the others, with no bonus row (a stop decided by a symbol never skips its check)
        rows = min(len(law) for law in laws)
        n = min(rows, len(draft))
        r = combined_rows(members, [law[:rows] for law in laws], combination, params)
        q = laws[drafter][:n].float()
        block = torch.tensor(draft[:n], dtype=torch.long)
        n_acc, nxt = (int(x) for x in verify_block(block, q, r, params.greedy, generator))
        emitted = draft[:n_acc] + ([nxt] if nxt != NO_TOKEN else [])
        rounds, accepted = rounds + 1, 0.7 * accepted + 0.3 * n_acc
        for symbol in emitted[: max_bytes - len(out) + 1]:
            for member in members:
                member.advance(symbol)
            if symbol == END:
                return ByteGeneration(bytes(out), True, rounds)
            out.append(symbol)
            if len(out) == max_bytes:
                break
    return ByteGeneration(bytes(out), False, rounds)
