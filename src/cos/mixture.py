"""A weighted ensemble read as a mixture: the coins, the block they fix, and its cost model.

Pure math (CONTRIBUTING.md §1): no model, no cache. The decoding loop is methods/mixture.py; the proof
sketch and the cost model in words are in docs/mixture_sampling.md.

For r = Σ w_i p_i (probs space, each p_i processed per member) the component z_t ~ w of every
position t is drawn from a generator of its own (`Coins`). Conditioned on z, position t must have
law p_{z_t}; marginally the output then has law r. The proposer s drafts; its own positions
(z_t = s) are exact samples and are accepted outright; a foreign position (z_t = k ≠ s) is verified
against p_k. `plan_block` fixes a round from the coins alone: the proposer drafts up to the
(m+1)-th foreign position, exclusive (at most `cap` positions), the first m foreign ones are verified,
and the position right after the block (the closing position) is emitted when every verified position
was accepted: free from the distribution a verifier's pass already gave there when it owns it (the
bonus), else by its owner running (the proposer drafting one more; another member, catching up in
one forward, sampling from its own p: the ME step). m = 0 is ME: nothing foreign is ever drafted.
"""

from __future__ import annotations

import itertools
import operator
from collections import defaultdict
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

import torch

from .schedule import fastest

Seconds = Callable[[int, int], "float | None"]  # (member, tokens fed) -> seconds per forward


class Coins:
    """z_t ~ w for the positions a round reads, from a generator of their own. Every round draws fresh
    coins and the ones it read but did not emit are dropped with it: rounds are then stopping rules on
    independent coins, so what the next round is (its m, or a CoS round instead: methods/kinds.py) may
    depend on anything in the past, the last round's timings included, without touching r."""

    def __init__(self, weights: Sequence[float], seed: int) -> None:
        self.cumulative = torch.tensor(list(itertools.accumulate(weights)), dtype=torch.float64)
        self.generator = torch.Generator().manual_seed(seed)

    def draw(self, n: int) -> list[int]:
        """The components of the next n positions, fresh."""
        u = torch.rand(n, generator=self.generator, dtype=torch.float64)
        # component i where cum[i-1] <= u·Σw < cum[i] (right side): a zero weight is never drawn
        drawn = torch.searchsorted(self.cumulative, u * self.cumulative[-1], right=True)
        return drawn.clamp_max(len(self.cumulative) - 1).tolist()


@dataclass(frozen=True)
class Block:
    drafted: int  # positions the proposer drafts (its own are accepted outright)
    foreign: tuple[int, ...]  # indices among them owned by other members: verified against their p
    verifiers: frozenset[int]  # the owners of those: each scores the block in one pass
    closing: int  # the owner of position `drafted`, emitted after a fully accepted block


def plan_block(z: Sequence[int], proposer: int, m: int, cap: int) -> Block:
    """A round from its coins z[0..cap] alone: the proposer drafts up to the (m+1)-th foreign
    position (exclusive) or `cap` positions; the first m foreign ones are verified."""
    assert len(z) > cap >= 0 and m >= 0, (len(z), cap, m)
    foreign: list[int] = []
    end = cap
    for j in range(cap):
        if z[j] != proposer:
            if len(foreign) == m:
                end = j
                break
            foreign.append(j)
    return Block(end, tuple(foreign), frozenset(z[j] for j in foreign), z[end])


# --------------------------------------------------------------------------- the cost model (§6)
def block_seconds(drafted: int, verifiers: Collection[int], closing: int, proposer: int,
                  seconds: Seconds) -> tuple[float, float] | None:
    """(seconds of a block's calls, seconds of emitting its closing position) under the cost model; None
    while a cost is not measured. The block: each drafted position one proposer step, each verifier one
    pass over it (drafted + 1 tokens fed). The closing position, emitted only after a fully accepted
    block, costs nothing when a verifier owns it (the bonus), one proposer step when the proposer owns
    it, and otherwise one forward of its owner that catches up on the block: drafted + 1 tokens fed,
    priced as such (on a CPU where a forward's cost grows with the tokens fed, as bf16 without native
    bf16 does, that catch-up costs drafted + 1 steps and ME saves nothing; charging it one step made
    the schedule expect 6.6 tokens/s of rounds that ran 3.9)."""
    step = seconds(proposer, 1)
    verify = [seconds(k, drafted + 1) for k in verifiers]
    close = 0.0 if closing in verifiers else seconds(closing, 1 if closing == proposer else drafted + 1)
    if step is None or close is None or None in verify:
        return None
    return drafted * step + sum(verify), close


def round_expectation(weights: Sequence[float], proposer: int, m: int, cap: int, beta: float | Sequence[float],
                      seconds: Seconds) -> tuple[float, float] | None:
    """(expected tokens, expected seconds) of one round that drafts m foreign positions (at most `cap`
    drafted), over the coins; None while a cost it needs is not measured.

    beta: the chance a drafted foreign position is accepted (Σ min(p_s, p_k), pooled over members); a
    sequence: beta[i] for the (i+1)-th foreign position of the round, given the i before it were
    accepted. Each round's calls are priced by `block_seconds`. The scan is a stopping rule on fresh
    coins and every coin a round reads is emitted unless a rejection ends the round first, so rounds
    are independent and tokens / seconds is the long-run rate of the policy."""
    live = [(k, w) for k, w in enumerate(weights) if w > 0]
    betas = [beta] * m if isinstance(beta, (int, float)) else list(beta[:m])
    assert len(betas) == m, f"{m} foreign positions need {m} acceptance chances, got {len(betas)}"
    reach = list(itertools.accumulate(betas, operator.mul, initial=1.0))  # reach[i]: the first i accepted
    tokens = time = 0.0
    missing = False

    def end(p: float, d: int, i: int, verifiers: frozenset[int], closing: int) -> None:
        nonlocal tokens, time, missing
        priced = block_seconds(d, verifiers, closing, proposer, seconds)
        if priced is None:
            missing = True
            return
        tokens += p * reach[i] * (d + 1)  # every verified position accepted: the block and its closing
        time += p * (priced[0] + reach[i] * priced[1])

    states: dict[tuple[int, frozenset[int]], float] = {(0, frozenset()): 1.0}  # (foreign so far, owners) -> P
    for j in range(cap):
        scanned: dict[tuple[int, frozenset[int]], float] = defaultdict(float)
        for (i, owners), p in states.items():
            for k, w in live:
                if k == proposer:
                    scanned[i, owners] += p * w
                elif i == m:  # the (m+1)-th foreign position closes the block
                    end(p * w, j, i, owners, k)
                else:  # the (i+1)-th foreign position: drafted; a rejection here emits j + 1 tokens
                    tokens += p * w * reach[i] * (1 - betas[i]) * (j + 1)
                    scanned[i + 1, owners | {k}] += p * w
        states = scanned
    for (i, owners), p in states.items():  # `cap` drafted: the closing position's owner is a fresh coin
        for k, w in live:
            end(p * w, cap, i, owners, k)
    return None if missing or time <= 0 else (tokens, time)


def rate(weights: Sequence[float], proposer: int, m: int, cap: int, beta: float | Sequence[float],
         seconds: Seconds) -> float | None:
    """Expected tokens per second of rounds drafting m foreign positions (None while a cost is unmeasured)."""
    value = round_expectation(weights, proposer, m, cap, beta, seconds)
    return None if value is None else value[0] / value[1]


def predicted_speedup(weights: Sequence[float], proposer: int, beta: float, seconds_per_call: Sequence[float],
                      gamma: int, m: int | None = None) -> float | None:
    """Speedup over standard WE (Σ_i t_i per token) of the policy drafting m foreign positions per
    round (None: the best m for this β and these costs, the adaptive schedule's aim), with t_i member
    i's seconds per call whatever it feeds (docs/algorithm.md §6: verifying is memory-bound).
    ME (m = 0, γ = 1) gives Σ t_i / Σ w_i t_i."""
    if any(t <= 0 for t in seconds_per_call):
        return None
    seconds = lambda i, n: seconds_per_call[i]
    rates = [rate(weights, proposer, k, gamma, beta, seconds) for k in range(gamma + 1)]
    return rates[fastest(gamma, rates.__getitem__) if m is None else m] * sum(seconds_per_call)
