"""CoS: the alternate proposal framework for n members (docs/algorithm.md §4.2-4.3; paper Alg. 1-2).

State: committed tokens (st.seq); pending tokens S_c, each drawn from its owner's own distribution
q; per member k, `cached[k]`: the logits it has already computed at the positions of a
head-aligned prefix of S_c. One round:
  1. nothing pending: the default proposer drafts γ tokens (the schedule's k; k = 0: a standard round);
  2. the first member with nothing cached scores all of S_c in one pass and appends its bonus
     (drawn from its own distribution, to be verified later like any draft);
  3. while every member has the head cached, the head block is verified against r; a rejection
     commits the residual, clears everything and restarts from the default proposer;
  4. if nothing was rejected, the scorer drafts γ-1 more after committed + S_c (the adaptive schedule:
     the count in 0..γ-1 its cost model measures fastest, the bonus counted as a free draft); where it
     measures standard rounds faster than any chain (a CPU whose forwards grow with the tokens fed, as
     torch's bf16 GEMM does without native bf16 and without the kernels), the pending proposals are
     dropped unverified instead, and the next round is a standard one.
Drafts are always conditioned on committed + accepted + pending tokens (no stale context). Dropping
unverified proposals is exact: the choice depends on past timings and acceptances, never on their
values, and nothing of them was committed.
"""

from __future__ import annotations

import torch

from ..acceptance import verify_block
from ..proposer import MemberProposer
from ..sampling import pick, to_probs
from ..schedule import Schedule
from .standard import fallback_round
from .state import DecodeState


class AlternateLoop:
    def __init__(self, st: DecodeState, gammas: list[int], default_proposer: int, schedule: Schedule,
                 stop_below: float = 0.0) -> None:
        """schedule: the default proposer's draft length when nothing is pending (its γ, or adaptive;
        0 = a standard round). stop_below: every proposer's confidence threshold (proposer.MemberProposer)."""
        self.st = st
        self.gammas = gammas
        self.default = default_proposer
        self.schedule = schedule
        self.proposers = [MemberProposer(m, st.params, st.generator, stop_below) for m in st.members]
        self._clear()

    def _clear(self) -> None:
        self.pending = self.st.seq.new_empty(0)  # [P]
        self.q: torch.Tensor | None = None  # [P, V] (None under greedy decoding)
        self.cached: list[torch.Tensor | None] = [None] * len(self.st.members)

    @property
    def idle(self) -> bool:
        """Nothing pending: the next round starts a chain from the committed tokens (methods/kinds.py may
        then run a round of another kind)."""
        return self.pending.shape[0] == 0

    def _append(self, member: int, tokens: torch.Tensor, q: torch.Tensor | None, logits: torch.Tensor) -> None:
        self.pending = torch.cat([self.pending, tokens])
        if q is not None:
            self.q = q if self.q is None else torch.cat([self.q, q])
        old = self.cached[member]
        self.cached[member] = logits if old is None else torch.cat([old, logits])

    def _draft(self, member: int, k: int) -> None:
        budget = self.st.remaining - self.pending.shape[0]
        d = self.proposers[member].propose(torch.cat([self.st.seq, self.pending]), max(1, min(k, budget)))
        self._append(member, d.tokens, d.q, d.logits)

    def round(self) -> list[int]:
        st, greedy = self.st, self.st.params.greedy
        start = st.seq.shape[0]
        # 1. nothing pending: the default proposer drafts (as many as the schedule says; 0 = a standard round)
        if self.pending.shape[0] == 0:
            others = [m.costs for i, m in enumerate(st.members) if i != self.default]
            k = self.schedule.length(st.members[self.default].costs, others, True)
            if k == 0:
                return fallback_round(st)
            self._draft(self.default, k)
        # 2. a member with nothing cached scores all pending tokens in one pass, then draws its bonus
        m = next(i for i, c in enumerate(self.cached) if c is None)
        n_pending = self.pending.shape[0]
        logits = st.members[m].score(torch.cat([st.seq, self.pending]), n_pending + 1).to(st.device)
        q_bonus = None if greedy else to_probs(logits[-1:], st.params)  # [1, V]
        bonus = logits[-1:].argmax(-1) if greedy else pick(q_bonus, False, st.generator)
        self._append(m, bonus, q_bonus, logits)
        # 3. verify the head block that every member has scored
        emitted: list[int] = []
        if all(c is not None for c in self.cached):
            n = min(c.shape[0] for c in self.cached)
            r = st.r([c[:n] for c in self.cached])  # [n, V]
            q = None if greedy else self.q[:n]
            n_acc, nxt = verify_block(self.pending[:n], q, r, greedy, st.generator)
            *tokens, n_acc, nxt = torch.cat([self.pending[:n], n_acc.view(1), nxt.view(1)]).tolist()
            st.count_round(n, n_acc, self.schedule)
            if n_acc < n:  # rejection: commit the residual, clear, restart from the default proposer
                emitted = st.commit(tokens[:n_acc] + [nxt], keep_cached=start + n_acc)
                self._clear()
                return emitted
            emitted = st.commit(tokens, keep_cached=start + n)
            self.pending = self.pending[n:]
            self.q = None if greedy else self.q[n:]
            self.cached = [c[n:] if c.shape[0] > n else None for c in self.cached]
        # 4. nothing rejected: the scorer drafts up to γ-1 more tokens after committed + pending (as many
        #    as the schedule measures fastest), unless it measures standard rounds faster: then the chain
        #    stops here (its proposals dropped) and the next round is a standard one
        others = [c.costs for i, c in enumerate(st.members) if i != m]
        more = self.schedule.continuation(st.members[m].costs, others, True, self.gammas[m] - 1)
        if more is None:
            self._clear()
        elif more > 0 and not st.done:
            self._draft(m, more)
        return emitted
