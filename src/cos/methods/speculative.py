"""`sd` and Naive-CoS (`we_sd`, `cd_sd`): a fixed proposer drafts γ tokens, the others verify against r.

`sd`: the proposer is a draft model outside the combination (r = the target's distribution), so r
is known at the position after the block and a bonus token is drawn there (Leviathan et al. 2023).
Naive-CoS: the proposer is a member, so r at that position also needs the proposer's logits there.
With `bonus="none"` (the paper) nothing is drawn; with `bonus="exact"` (docs/algorithm.md §4.1) the
verifiers' distributions there are kept, and once the proposer computes its own (its next forward,
needed anyway) a token is drawn from r directly: exact and never rejected.
"""

from __future__ import annotations

import torch

from ..acceptance import NO_TOKEN, verify_block
from ..proposer import MemberProposer
from ..sampling import pick
from ..schedule import Schedule
from .standard import fallback_round
from .state import DecodeState


class SpeculativeLoop:
    def __init__(self, st: DecodeState, proposer: int | None, schedule: Schedule, bonus: str,
                 stop_below: float = 0.0) -> None:
        """proposer: config index into st.members, or None for st.draft_model (sd).
        schedule: the draft length before each round (γ, or adaptive; 0 = a standard round).
        stop_below: the proposer's confidence threshold (proposer.MemberProposer)."""
        self.st = st
        self.p = proposer
        self.schedule = schedule
        self.bonus = bonus
        member = st.draft_model if proposer is None else st.members[proposer]
        self.proposer = MemberProposer(member, st.params, st.generator, stop_below)
        self.verifiers = [m for i, m in enumerate(st.members) if i != proposer]
        self.carry: list[torch.Tensor] | None = None  # verifiers' logits at the next position

    @property
    def idle(self) -> bool:
        """Nothing carried into the next round (`tree: auto` may then run a tree round instead)."""
        return self.carry is None

    def _config_order(self, proposer_logits: torch.Tensor, verifier_logits: list[torch.Tensor]) -> list[torch.Tensor]:
        rows = list(verifier_logits)
        rows.insert(self.p, proposer_logits)
        return rows

    def round(self) -> list[int]:
        st, greedy = self.st, self.st.params.greedy
        seq, start = st.seq, st.seq.shape[0]
        # 0. how many drafts: the plan's γ, or the schedule's choice from costs measured so far
        gamma = self.schedule.length(self.proposer.member.costs, [m.costs for m in self.verifiers], self.p is not None)
        if gamma == 0 and self.carry is None:  # a standard round is expected to be faster now
            return fallback_round(st)
        # 1. bonus from the carried verifier distributions: the proposer's forward here completes r
        head_tokens, head_q, head_r = [], [], []
        if self.carry is not None:
            r0 = st.r(self._config_order(self.proposer.member.score(seq, 1), self.carry))  # [1, V]
            head_tokens, head_q, head_r = [pick(r0, greedy, st.generator)], [r0], [r0]
            seq = torch.cat([seq, head_tokens[0]])
            self.carry = None
        # 2. propose γ drafts after committed + bonus (fewer when the token budget is nearly spent, or
        #    when the proposer's confidence falls below its threshold)
        k = max(1, min(gamma, st.remaining - len(head_tokens)))
        draft = self.proposer.propose(seq, k)
        k = draft.tokens.shape[0]
        block = torch.cat([seq, draft.tokens])
        # 3. each verifier scores the whole block in one pass: k draft positions + the next one
        v = [m.score(block, k + 1) for m in self.verifiers]  # n_v × [k+1, V]
        if self.p is None:  # sd: r needs only the target, bonus row included
            r = st.r(v)  # [k+1, V]
        else:
            r = st.r(self._config_order(draft.logits, [x[:k] for x in v]))  # [k, V]
        # 4. accept / resample in one batched call, one host sync
        tokens = torch.cat(head_tokens + [draft.tokens])
        q = None if greedy else torch.cat(head_q + [draft.q])
        n_acc, nxt = verify_block(tokens, q, torch.cat(head_r + [r]), greedy, st.generator)
        *host_tokens, n_acc, nxt = torch.cat([tokens, n_acc.view(1), nxt.view(1)]).tolist()
        # 5. commit, roll back, count; keep the verifiers' next distributions after a full accept
        st.count_round(k, max(0, n_acc - len(head_tokens)), self.schedule)
        st.commit(host_tokens[:n_acc] + ([nxt] if nxt != NO_TOKEN else []), keep_cached=start + n_acc)
        if self.bonus == "exact" and self.p is not None and n_acc == len(host_tokens) and not st.done:
            self.carry = [x[k:] for x in v]
        return host_tokens
