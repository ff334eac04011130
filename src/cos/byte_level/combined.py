"""r over bytes: the combined law of the byte-level members, what every round over bytes samples or verifies against.

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

import torch

from ..combination import Combination
from ..sampling import SamplingParams
from .member import ByteMember


def combined_rows(members: Sequence[ByteMember], laws: Sequence[torch.Tensor], combination: Combination,
                  params: SamplingParams) -> torch.Tensor:
    """r [m, 257] from the members' byte-level laws [m, 257] (config order). A zero is read as the
    member's prune fraction in logit spaces (see above). Bytes some member cannot spell at all (no token
    of its vocabulary starts with them: invalid UTF-8 such as 0xF5-0xFF in some vocabularies) get 0 in r:
    no member's law is defined after them, so the ensemble's text is one every member can spell."""
    logits = []
    for member, law in zip(members, laws):
        logp = law.log()
        if combination.space != "probs":
            logp = logp.clamp(min=math.log(member.prune) if member.prune > 0 else -1e4)
        logits.append(logp.float())
    r = combination.distribution(logits, params)
    spelled = torch.stack([m.vocab.spelled for m in members]).all(0)
    if spelled.all():
        return r
    r = r.masked_fill(~spelled, 0.0)
    return r / r.sum(-1, keepdim=True)


def combined_law(members: Sequence[ByteMember], combination: Combination, params: SamplingParams) -> torch.Tensor:
    """r [257] after the bytes so far."""
    return combined_rows(members, [m.distribution()[None] for m in members], combination, params)[0]
