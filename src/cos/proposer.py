"""The proposer (CONTRIBUTING.md §4): `MemberProposer.propose(seq, k) -> Draft`.

A member drafting autoregressively is the only proposer the methods need: a separate draft model
(sd) is a member outside the combination. The loops read a draft's logits (Naive-CoS puts the
proposer's own into r) and its member's costs (the schedule), so a proposer without a member, such
as an n-gram lookup, would need those first; until one exists there is no separate interface to keep.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .member import Member
from .sampling import SamplingParams, pick, to_probs


@dataclass
class Draft:
    tokens: torch.Tensor  # [k] token ids, on the decoding device
    q: torch.Tensor | None  # [k, V] the distributions the tokens were drawn from (None if greedy)
    logits: torch.Tensor | None  # [k, V] the proposer's raw logits at the draft positions
    before: torch.Tensor | None = None  # [V] its logits at seq's last position, when asked (`look_back`)


class MemberProposer:
    """Drafts up to k tokens from a member's own sampling distribution, conditioned on all of `seq`.

    stop_below > 0 ends a draft early, after a token the member itself gave probability < stop_below
    (its sampling distribution; under greedy decoding its softmax): transformers'
    `assistant_confidence_threshold`. At least one token is drafted. The length then depends on the
    draft alone, never on the verifiers, so every drafted token is verified as before and the output
    keeps the exact distribution of r.
    """

    def __init__(self, member: Member, params: SamplingParams, generator: torch.Generator | None,
                 stop_below: float = 0.0) -> None:
        self.member = member
        self.params = params
        self.generator = generator
        self.stop_below = stop_below

    def propose(self, seq: torch.Tensor, k: int, look_back: bool = False) -> Draft:
        """look_back: also return the member's logits at seq's last position (`Draft.before`), from the
        same first forward: free when that position is not cached yet, as after another member emitted it."""
        tokens, qs, logits, before = [], [], [], None
        for i in range(k):
            rows = self.member.score(seq, 2 if look_back and i == 0 else 1).to(seq.device)  # [1 or 2, V]
            before, l = (rows[0], rows[1]) if rows.shape[0] == 2 else (before, rows[0])
            q = None if self.params.greedy else to_probs(l, self.params)
            token = l.argmax(-1) if q is None else pick(q, False, self.generator)
            seq = torch.cat([seq, token.view(1)])
            tokens.append(token)
            logits.append(l)
            qs.append(q)
            if self.stop_below > 0 and self._confidence(l, q, token) < self.stop_below:
                break
        return Draft(
            tokens=torch.stack(tokens),
            q=None if self.params.greedy else torch.stack(qs),
            logits=torch.stack(logits),
            before=before,
        )

    @staticmethod
    def _confidence(logits: torch.Tensor, q: torch.Tensor | None, token: torch.Tensor) -> float:
        """The member's own probability of the token it drafted."""
        if q is not None:
            return float(q[token])
        return float(torch.softmax(logits.float(), -1)[token])
