"""`we_mix` (ME, the mixture step) and `we_mix_sd` (the coin-first hybrid): a weighted ensemble in probs
space sampled as the mixture it is (cos/mixture.py; proof sketch: docs/mixture_sampling.md).

Every position's component z_t ~ w is drawn first, from the coins' own generator, fresh each round.
One round:
  1. how many foreign positions to draft, m (the schedule: γ, or the best m for the measured β and
     costs; `we_mix`: always 0), and the block the coins then fix;
  2. the proposer drafts the block; its own positions are accepted outright;
  3. each member owning a drafted foreign position scores the block in one pass (catching up on all
     it skipped); the foreign positions are verified against their owners' p: min(1, p_k / p_s), at
     the first rejection a residual from norm(max(0, p_k - p_s)) ends the block;
  4. a fully accepted block emits its closing position: the bonus from a verifier that owns it, else
     its owner runs (the proposer drafts one more; another member catches up in one forward and
     samples from its own p: the ME step);
  5. commit, roll back what was rejected, count (the coins the round read and did not emit are dropped
     with it); under the adaptive schedule, report the round's seconds beside what the model prices it at.
A block with no foreign position needs no verify pass; a member nobody needs does not run.

The adaptive schedule learns β from the foreign positions it drafts; rounds of m = 0 draft none, so
once it chose ME it would never see evidence to leave it (the exploration trap). Every ME step is evidence too: member k
emitted a foreign position from p_k, and the proposer's next forward feeds that token anyway, so one
more logits row there gives p_s and the exact acceptance chance Σ min(p_s, p_k) of a draft at that
position, for no extra forward. Statistics only: no draw depends on it.
"""

from __future__ import annotations

import time

import torch

from ..acceptance import NO_TOKEN, verify_block
from ..mixture import Coins, block_seconds, plan_block, round_expectation
from ..proposer import MemberProposer
from ..sampling import sample, to_probs
from ..schedule import Schedule
from .state import DecodeState

COIN_STREAM = 0x5EED  # the coins' generator: seeded from the request's seed, apart from the token draws


class MixtureLoop:
    def __init__(self, st: DecodeState, weights: tuple[float, ...], proposer: int, gamma: int,
                 schedule: Schedule | None) -> None:
        """gamma: the most positions the proposer drafts in a round. schedule: the foreign positions
        drafted per round (m in 0..γ); None: m = 0 always (ME: no foreign position is ever drafted)."""
        assert not st.params.greedy and st.generator is not None, "a mixture is sampled (plan.check_sampling)"
        self.st = st
        self.weights = weights
        self.s = proposer
        self.gamma = gamma
        self.schedule = schedule
        self.coins = Coins(weights, st.generator.initial_seed() ^ COIN_STREAM)
        self.drafter = MemberProposer(st.members[proposer], st.params, st.generator)
        self.learns = schedule is not None and schedule.kind == "adaptive"
        self.own_step: tuple[int, torch.Tensor] | None = None  # (position, p_k) of the last ME step, for β

    idle = True  # a round leaves nothing pending (the coins it read and did not emit are dropped)

    def _foreign_to_draft(self) -> int:
        if self.schedule is None:
            return 0
        members = self.st.members
        others = [m.costs for i, m in enumerate(members) if i != self.s]
        return self.schedule.length(members[self.s].costs, others, True, self._expectation)

    def _seconds(self, member: int, fed: int) -> float | None:
        return self.st.members[member].costs(fed)

    def _expectation(self, m: int, betas: list[float]) -> tuple[float, float] | None:
        """(Expected tokens, expected seconds) of a round drafting m foreign positions (cos/mixture.py's
        cost model with the members' measured seconds per forward, β by depth in the round); None while
        a cost is not measured."""
        return round_expectation(self.weights, self.s, m, self.gamma, betas, self._seconds)

    def _own_step(self, member: int, seq: torch.Tensor) -> torch.Tensor:
        """The ME step: a member catches up on everything it skipped in one forward, samples from its p."""
        p = to_probs(self.st.members[member].score(seq, 1).to(self.st.device), self.st.params)  # [1, V]
        if self.learns:
            self.own_step = (seq.shape[0], p[0])
        return sample(p, self.st.generator)  # [1]

    def _draft(self, seq: torch.Tensor, k: int):
        """The proposer drafts k positions; right after an ME step its first forward also gives p_s at
        that step's position, and Σ min(p_s, p_k) there is β evidence for the schedule."""
        look_back = self.own_step is not None and self.own_step[0] == seq.shape[0] - 1
        draft = self.drafter.propose(seq, k, look_back)
        if look_back:
            p_s = to_probs(draft.before, self.st.params)
            self.schedule.observe_chance(float(torch.minimum(p_s, self.own_step[1]).sum()))
        self.own_step = None
        return draft

    def round(self) -> list[int]:
        st = self.st
        start, budget = st.seq.shape[0], st.remaining
        cap = min(self.gamma, budget)
        # 1. the coins of the positions ahead fix the block; m from the past alone
        started = time.perf_counter()
        m = self._foreign_to_draft()
        z = self.coins.draw(cap + 1)
        block = plan_block(z, self.s, m, cap)
        closes = block.drafted < budget  # the closing position is still within max_new_tokens
        priced = block_seconds(block.drafted, block.verifiers, block.closing, self.s, self._seconds) \
            if self.learns and cap == self.gamma else None
        # 2. the proposer drafts the block (its own positions are final unless a foreign one is rejected)
        tokens = st.seq.new_empty(0)
        if block.drafted:
            draft = self._draft(st.seq, block.drafted)
            tokens = draft.tokens
        seq = torch.cat([st.seq, tokens])
        n_keep, nxt = block.drafted, NO_TOKEN
        if block.foreign:
            # 3. each owner of a foreign position scores the block in one pass (+ the closing position)
            probs = {k: to_probs(st.members[k].score(seq, block.drafted + 1).to(st.device), st.params)
                     for k in sorted(block.verifiers)}  # k -> [d+1, V]
            rows = torch.tensor(block.foreign, device=st.device)
            target = torch.stack([probs[z[j]][j] for j in block.foreign])  # [f, V]: p_{z_j} at position j
            if closes and block.closing in block.verifiers:  # the bonus row
                target = torch.cat([target, probs[block.closing][-1:]])
            n_acc, nxt = verify_block(tokens[rows], draft.q[rows], target, False, st.generator)
            n_acc, nxt = torch.stack([n_acc, nxt]).tolist()
            st.count_round(len(block.foreign), n_acc, self.schedule)
            if n_acc < len(block.foreign):  # the residual ends the round at the rejected position
                n_keep = block.foreign[n_acc]
        emitted = tokens[:n_keep].tolist() + ([nxt] if nxt != NO_TOKEN else [])
        # 4. a fully accepted block with no bonus: the closing position's owner runs
        if n_keep == block.drafted and nxt == NO_TOKEN and closes:
            if block.closing == self.s:
                emitted += self._draft(seq, 1).tokens.tolist()
            else:
                emitted += self._own_step(block.closing, seq).tolist()
        # 5. commit (members keep what was fed before the first rejected position)
        emitted = st.commit(emitted, keep_cached=start + n_keep)
        if priced is not None:  # what the round cost against what the model prices its calls at
            closed = n_keep == block.drafted and closes  # the closing position was emitted (free if a bonus)
            self.schedule.observe_seconds(m, time.perf_counter() - started, priced[0] + closed * priced[1])
        return emitted
