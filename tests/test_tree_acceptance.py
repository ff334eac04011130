"""Tree acceptance (cos.acceptance_tree): exact enumeration, tables, the chain case, seeded Monte Carlo.

The claim: whatever tree is drafted, the emitted tokens are distributed as token-by-token sampling
from r. Here r at a slot is a function of the slot's token path (`r_row`), so "the law of r" is well
defined, and the trials at a slot are drawn from their proposal rows independently of each other
(`Spec`), duplicates merged into one node as the tree builder does. A walk that ends with NO_TOKEN
(the final slot's r was not computed) is continued by sampling from r, as the next round would.

Monte Carlo bound as in test_sampling_exact.py: the L1 distance between the empirical and the exact
law over K outcomes, threshold λ = sqrt(2 (K ln 2 + ln(1/δ)) / N) (Bretagnolle-Huber-Carol), a
false-failure probability of at most δ = 1e-6. The negative control (a sibling tried against r
instead of the residual the rejected ones left) must exceed it.
"""

from __future__ import annotations

import copy
import functools
import itertools
import math
import zlib
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Callable

import pytest
import torch

import cos.acceptance_tree
from cos.acceptance import NO_TOKEN, residual_distribution, verify_block
from cos.acceptance_tree import verify_tree
from cos.sampling import sample

VOCAB, DEPTH = 3, 2
N_SAMPLES, DELTA, MC_TOKENS = 20000, 1e-6, 2
THRESHOLD = math.sqrt(2 * (VOCAB**MC_TOKENS * math.log(2) + math.log(1 / DELTA)) / N_SAMPLES)


# ---- distributions, trees, specs ----------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def random_row(*key) -> tuple[float, ...]:
    """A fixed random distribution over VOCAB for `key`, peaked, with holes (zeros) now and then."""
    gen = torch.Generator().manual_seed(zlib.crc32(repr(key).encode()))
    x = torch.rand(VOCAB, generator=gen, dtype=torch.float64) ** 2
    x[torch.rand(VOCAB, generator=gen) < 0.25] = 0
    if x.sum() == 0:
        x[int(torch.randint(VOCAB, (1,), generator=gen))] = 1
    return tuple((x / x.sum()).tolist())


def r_row(path: tuple[int, ...]) -> tuple[float, ...]:
    """The combined distribution after the token path `path` (from the committed text)."""
    return random_row("r", path)


def one_hot(t: int) -> tuple[float, ...]:
    return tuple(float(i == t) for i in range(VOCAB))


def true_law(length: int) -> dict[tuple[int, ...], float]:
    """P(x1..x_length) = Π r(x_t | x_<t)."""
    return {seq: math.prod(r_row(seq[:i])[t] for i, t in enumerate(seq))
            for seq in itertools.product(range(VOCAB), repeat=length)}


@dataclass(frozen=True)
class Spec:
    """How a tree is drafted: `rows(path)` are the proposal rows of the trials at the slot reached by
    `path` (each trial draws its token from its row, independently); `known(path)` says whether r is
    computed at a slot without trials."""

    rows: Callable[[tuple[int, ...]], list[tuple[float, ...]]]
    known: Callable[[tuple[int, ...]], bool] = lambda path: True


@dataclass
class Draft:
    """A drafted tree in verify_tree's terms; slot 0 is the root, slot i + 1 is node i."""

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    trials: list[list[tuple[int, int]]] = field(default_factory=lambda: [[]])
    q: list[tuple[float, ...]] = field(default_factory=list)
    paths: list[tuple[int, ...]] = field(default_factory=lambda: [()])  # token path of each slot

    def add_trials(self, slot: int, drawn: list[int], rows: list[tuple[float, ...]]) -> list[int]:
        """Record the trials drawn at `slot` (a repeated token reuses its node, an equal row its q row);
        returns the slots of the new nodes."""
        new = []
        for x, row in zip(drawn, rows):
            node = next((i for i, (t, p) in enumerate(zip(self.tokens, self.parents)) if t == x and p == slot - 1), None)
            if node is None:
                node = len(self.tokens)
                self.tokens.append(x)
                self.parents.append(slot - 1)
                self.trials.append([])
                self.paths.append(self.paths[slot] + (x,))
                new.append(node + 1)
            if row not in self.q:
                self.q.append(row)
            self.trials[slot].append((node, self.q.index(row)))
        return new

    def r_known(self, spec: Spec) -> list[bool]:
        return [bool(self.trials[s]) or spec.known(self.paths[s]) for s in range(len(self.paths))]

    def args(self, spec: Spec) -> tuple:
        """verify_tree's arguments but the last two; unknown r rows are NaN (never to be read)."""
        known = self.r_known(spec)
        r = [r_row(p) if k else (math.nan,) * VOCAB for p, k in zip(self.paths, known)]
        return (torch.tensor(self.tokens, dtype=torch.long), self.parents, self.trials,
                torch.tensor(self.q, dtype=torch.float64).reshape(-1, VOCAB), torch.tensor(r, dtype=torch.float64),
                known)


def all_drafts(spec: Spec):
    """Every tree `spec` can draft, with its probability: each slot's trial tokens enumerated jointly
    (Π of their rows' probabilities), slots expanded breadth first (so nodes come in topological order)."""

    def expand(prob: float, draft: Draft, queue: list[int]):
        if not queue:
            yield prob, draft
            return
        slot, rest = queue[0], queue[1:]
        rows = spec.rows(draft.paths[slot])
        for drawn in itertools.product(range(VOCAB), repeat=len(rows)):
            p = math.prod(row[x] for row, x in zip(rows, drawn))
            if p > 0:
                child = copy.deepcopy(draft)
                new = child.add_trials(slot, list(drawn), rows)
                yield from expand(prob * p, child, rest + new)

    yield from expand(1.0, Draft(), [0])


def draw_draft(spec: Spec, generator: torch.Generator) -> Draft:
    """One tree drafted by `spec`, its trial tokens drawn with `generator` (one draw per slot)."""
    draft, queue = Draft(), [0]
    while queue:
        slot = queue.pop(0)
        rows = spec.rows(draft.paths[slot])
        if rows:
            drawn = sample(torch.tensor(rows, dtype=torch.float64), generator).tolist()
            queue += draft.add_trials(slot, drawn, rows)
    return draft


def by_depth(*levels):
    """rows(path) = levels[len(path)](path), and no trials below DEPTH."""
    return lambda path: levels[len(path)](path) if len(path) < DEPTH else []


SPECS = {
    # three i.i.d. siblings at the root (duplicates are common with 3 tokens); below, a node for token
    # 0 has two i.i.d. children, token 1 one, token 2 none (its children dropped: bonus from r);
    # leaves have r known or not, by their path
    "iid": Spec(by_depth(lambda p: [random_row("q", p)] * 3,
                         lambda p: [random_row("q", p)] * (2 - p[-1]) if p[-1] < 2 else []),
                known=lambda p: sum(p) % 2 == 0),
    # every sibling from its own row; a node for token 2 is an unexpanded leaf (r unknown)
    "rows": Spec(by_depth(lambda p: [random_row("q", p, j) for j in range(3)],
                          lambda p: [random_row("q", p, j) for j in range(2)] if p[-1] != 2 else []),
                 known=lambda p: len(p) == 2 and p[0] == p[1]),
    # a deterministic proposal first (a prompt-lookup token), then i.i.d. samples that may repeat it
    # (the same node tried again from a different row)
    "one_hot_first": Spec(by_depth(lambda p: [one_hot(1), random_row("q", p), random_row("q", p)],
                                   lambda p: [one_hot(p[-1]), random_row("q", p)])),
    # a chain: one trial per slot
    "chain": Spec(by_depth(lambda p: [random_row("q", p)], lambda p: [random_row("q", p)]),
                  known=lambda p: False),
}


# ---- the reference: exact outcome distribution of one tree -----------------------------------------

def residual_py(cur, q):
    """norm(max(0, cur - q)), falling back to cur without positive mass (as acceptance.residual_distribution)."""
    diff = [max(0.0, c - x) for c, x in zip(cur, q)]
    mass = sum(diff)
    return [d / mass for d in diff] if mass > 0 else list(cur)


def exact_outcomes(draft: Draft, spec: Spec, residual=residual_py, slot: int = 0) -> dict[tuple, float]:
    """P(accepted tokens, next_token) of the walk from `slot`, enumerating accept/reject branches: a trial
    x from row q is accepted with probability min(1, cur(x)/q(x)); on rejection cur <- residual(cur, q);
    when all are rejected the next token comes from cur."""
    out: dict[tuple, float] = defaultdict(float)
    if not draft.trials[slot]:
        if not draft.r_known(spec)[slot]:
            return {((), NO_TOKEN): 1.0}
        return {((), t): p for t, p in enumerate(r_row(draft.paths[slot]))}
    cur, reach = r_row(draft.paths[slot]), 1.0
    for node, row in draft.trials[slot]:
        x, q = draft.tokens[node], draft.q[row]
        accept = min(1.0, cur[x] / q[x]) if q[x] > 0 else float(cur[x] > 0)
        for (tokens, nxt), p in exact_outcomes(draft, spec, residual, node + 1).items():
            out[((x,) + tokens, nxt)] += reach * accept * p
        reach *= 1 - accept
        cur = residual(cur, q)
    for t, p in enumerate(cur):
        out[((), t)] += reach * p
    return out


def completed(outcomes: dict[tuple, float], length: int) -> dict[tuple[int, ...], float]:
    """The law of the first `length` emitted tokens, a walk's emitted tokens continued by sampling from r."""
    law: dict[tuple[int, ...], float] = defaultdict(float)

    def extend(seq, p):
        if len(seq) >= length:
            law[seq[:length]] += p
        else:
            for t, pt in enumerate(r_row(seq)):
                extend(seq + (t,), p * pt)

    for (tokens, nxt), p in outcomes.items():
        extend(tokens + ((nxt,) if nxt != NO_TOKEN else ()), p)
    return law


def drafted_law(spec: Spec, residual=residual_py, length: int = DEPTH + 1) -> dict[tuple[int, ...], float]:
    """The exact law of the first `length` emitted tokens, over every draft and every walk."""
    total: dict[tuple, float] = defaultdict(float)
    for prob, draft in all_drafts(spec):
        for outcome, p in exact_outcomes(draft, spec, residual).items():
            total[outcome] += prob * p
    return completed(total, length)


def max_gap(law, exact) -> float:
    return max(abs(law.get(x, 0.0) - p) for x, p in exact.items())


# ---- 1, 2: exact enumeration ------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(SPECS))
def test_exact_law_is_r(name):
    exact = true_law(DEPTH + 1)
    law = drafted_law(SPECS[name])
    assert abs(sum(law.values()) - 1) < 1e-9
    assert max_gap(law, exact) < 1e-9, name
    for t in range(VOCAB):  # spelled out: the first token is r at the root
        assert abs(sum(p for seq, p in law.items() if seq[0] == t) - r_row(())[t]) < 1e-9


@pytest.mark.parametrize("name", ["iid", "rows", "one_hot_first"])
def test_exact_negative_control_siblings_against_r(name):
    """Trying a sibling against r instead of the residual the rejected ones left is biased."""
    law = drafted_law(SPECS[name], residual=lambda cur, q: list(cur))
    assert max_gap(law, true_law(DEPTH + 1)) > 1e-3, name


def test_exact_negative_control_duplicate_skipped():
    """Treating a repeated draw as one trial (the residual updated once per node) is biased too."""

    def once_per_node(draft: Draft) -> Draft:
        draft = copy.deepcopy(draft)
        draft.trials = [list({node: (node, row) for node, row in reversed(tried)}.values())[::-1]
                        for tried in draft.trials]
        return draft

    spec = SPECS["iid"]
    total: dict[tuple, float] = defaultdict(float)
    for prob, draft in all_drafts(spec):
        for outcome, p in exact_outcomes(once_per_node(draft), spec).items():
            total[outcome] += prob * p
    assert max_gap(completed(total, DEPTH + 1), true_law(DEPTH + 1)) > 1e-3


# ---- 3: Monte Carlo of verify_tree -------------------------------------------------------------------

def empirical_l1(spec: Spec) -> float:
    """L1 distance between the first MC_TOKENS emitted tokens of N_SAMPLES seeded walks (each on its own
    drafted tree) and the law of r."""
    counts = Counter()
    for seed in range(N_SAMPLES):
        gen = torch.Generator().manual_seed(seed)
        draft = draw_draft(spec, gen)
        path, nxt = verify_tree(*draft.args(spec), False, gen)
        seq = tuple(draft.tokens[i] for i in path) + ((nxt,) if nxt != NO_TOKEN else ())
        while len(seq) < MC_TOKENS:  # the next round continues from r
            seq += (int(sample(torch.tensor(r_row(seq)), gen)),)
        counts[seq[:MC_TOKENS]] += 1
    return sum(abs(counts[x] / N_SAMPLES - p) for x, p in true_law(MC_TOKENS).items())


MC_SPEC = Spec(by_depth(lambda p: [one_hot(0), random_row("q", p), random_row("q", p)],
                        lambda p: [random_row("q", p)] * 2 if p[-1] != 1 else []),
               known=lambda p: p[-1] != 2)


@pytest.mark.slow
def test_monte_carlo_matches_r(monkeypatch):
    # the control's exact L1 here is ~0.35 against a threshold of ~0.045 (20000 draws, 9 outcomes)
    control = drafted_law(MC_SPEC, residual=lambda cur, q: list(cur), length=MC_TOKENS)
    assert sum(abs(control[x] - p) for x, p in true_law(MC_TOKENS).items()) > 3 * THRESHOLD
    assert empirical_l1(MC_SPEC) < THRESHOLD
    monkeypatch.setattr(cos.acceptance_tree, "residual_distribution", lambda cur, q: cur)
    assert empirical_l1(MC_SPEC) > THRESHOLD


# ---- tables: forced outcomes, greedy, edge cases ---------------------------------------------------

def t64(*rows):
    return torch.tensor(rows, dtype=torch.float64)


def test_table_duplicate_after_rejection_still_moves_the_residual():
    # root trials: token 0 (row 0) twice, then token 2 (one-hot row 1). r(0) = 0 rejects the first for
    # sure: cur = [0, .8, .2]; the duplicate is rejected too (cur(0) = 0) and leaves cur = [0, 1, 0],
    # so token 2 is rejected for sure and the residual is 1. Skipping the duplicate would accept 2 at .2.
    q = t64([0.5, 0.2, 0.3], [0, 0, 1])
    r = t64([0, 0.6, 0.4], [1, 0, 0], [1, 0, 0])
    for seed in range(50):
        got = verify_tree(torch.tensor([0, 2]), [-1, -1], [[(0, 0), (0, 0), (1, 1)], [], []], q, r,
                          [True] * 3, False, torch.Generator().manual_seed(seed))
        assert got == ([], 1)


def test_table_forced_accepts_down_to_a_bonus_or_no_token():
    # root: token 1 rejected for sure (r(1) = 0), its sibling token 2 accepted for sure (cur(2) = 1);
    # node 1 (token 2): its one child token 0 accepted for sure; then the leaf's r or NO_TOKEN
    q = t64([0, 1, 0], [0, 0, 1], [1, 0, 0])
    r = t64([0, 0, 1], [1, 0, 0], [1, 0, 0], [0, 0, 1])
    args = (torch.tensor([1, 2, 0]), [-1, -1, 1], [[(0, 0), (1, 1)], [], [(2, 2)], []], q, r)
    for seed in range(20):
        assert verify_tree(*args, [True] * 4, False, torch.Generator().manual_seed(seed)) == ([1, 2], 2)
        assert verify_tree(*args, [True, False, True, False], False, torch.Generator().manual_seed(seed)) == ([1, 2], NO_TOKEN)


def test_greedy_follows_argmax():
    # root children: token 2 (node 0), token 1 (node 1): argmax r[0] = 1 -> the second sibling.
    # node 1's children: token 0 (node 2), token 1 (node 3): argmax r[2] = 1 -> node 3, a leaf.
    tokens = torch.tensor([2, 1, 0, 1])
    parents = [-1, -1, 1, 1]
    trials = [[(0, 0), (1, 0)], [], [(2, 0), (3, 0)], [], []]
    r = t64([.1, .6, .3], [.2, .3, .5], [.2, .5, .3], [.9, .05, .05], [.1, .1, .8])
    assert verify_tree(tokens, parents, trials, None, r, [True] * 5, True, None) == ([1, 3], 2)  # bonus argmax
    assert verify_tree(tokens, parents, trials, None, r, [True, False, True, False, False], True, None) == ([1, 3], NO_TOKEN)
    # stop where argmax has no child: at node 1, argmax 2 -> next token 2
    r2 = r.clone()
    r2[2] = t64([.2, .2, .6])
    assert verify_tree(tokens, parents, trials, None, r2, [True] * 5, True, None) == ([1], 2)
    # stop at the root: argmax 0 has no child
    r3 = r.clone()
    r3[0] = t64([.7, .2, .1])
    assert verify_tree(tokens, parents, trials, None, r3, [True] * 5, True, None) == ([], 0)


def test_empty_tree_and_missing_r():
    empty = torch.empty(0, dtype=torch.long)
    r = t64([0.2, 0.5, 0.3])
    assert verify_tree(empty, [], [[]], None, r, [True], True, None) == ([], 1)
    assert verify_tree(empty, [], [[]], None, r, [False], True, None) == ([], NO_TOKEN)
    for seed in range(10):
        expected = int(sample(r[0], torch.Generator().manual_seed(seed)))
        got = verify_tree(empty, [], [[]], torch.zeros(0, 3), r, [True], False, torch.Generator().manual_seed(seed))
        assert got == ([], expected)
    one = torch.tensor([1])
    r2 = t64([0.2, 0.5, 0.3], [1, 0, 0])
    for greedy in (True, False):
        with pytest.raises(AssertionError):
            verify_tree(one, [-1], [[(0, 0)], []], t64([0, 1, 0]), r2, [False, True], greedy,
                        torch.Generator().manual_seed(0))


# ---- the chain case: verify_block ------------------------------------------------------------------

def random_chain(gen: torch.Generator, k: int, vocab: int = 4):
    """A chain draft of k tokens with float32 q [k, V] and r [k+1, V] (holes included), as the engine has."""
    def rows(n):
        x = torch.rand(n, vocab, generator=gen) ** 3
        x[torch.rand(n, vocab, generator=gen) < 0.2] = 0
        x[:, 0] += 1e-3
        return x / x.sum(-1, keepdim=True)

    q, r = rows(k), rows(k + 1)
    draft = sample(q, gen)
    trials = [[(i, i)] for i in range(k)] + [[]]
    return draft, list(range(-1, k - 1)), trials, q, r


def test_chain_equals_verify_block():
    """Same seed: the same u's (drawn one at a time here, all at once there), so the same accepted prefix;
    the next token is drawn at the same generator state when the rejection (or bonus) comes after the last
    u, and then it is the same token. Greedy: always the same."""
    gen = torch.Generator().manual_seed(1)
    compared = 0
    for case in range(300):
        k = 1 + case % 4
        draft, parents, trials, q, r = random_chain(gen, k)
        for bonus in (True, False):
            known = [True] * k + [bonus]
            r_block = r if bonus else r[:k]
            path, nxt = verify_tree(draft, parents, trials, q, r, known, True, None)
            n, block_next = verify_block(draft, None, r_block, True, None)
            assert (len(path), nxt) == (int(n), int(block_next))
            seed = 1000 * case + bonus
            path, nxt = verify_tree(draft, parents, trials, q, r, known, False, torch.Generator().manual_seed(seed))
            n, block_next = verify_block(draft, q, r_block, False, torch.Generator().manual_seed(seed))
            assert path == list(range(int(n)))
            if int(n) >= k - 1:
                assert nxt == int(block_next)
                compared += 1
    assert compared > 200


def test_chain_distribution_equals_verify_block_closed_form():
    """The exact outcome law of a chain walk is verify_block's: P(n = j, next = t) =
    Π_{i<j} min(1, r_i(x_i)/q_i(x_i)) · (1 - a_j) · residual_j(t), bonus row after a full accept."""
    spec = SPECS["chain"]
    for _, draft in all_drafts(spec):
        got = exact_outcomes(draft, spec)
        q, r = torch.tensor(draft.q, dtype=torch.float64), torch.tensor([r_row(p) for p in draft.paths], dtype=torch.float64)
        rows = [row for (_, row), in draft.trials[:DEPTH]]
        a = [min(1.0, float(r[i, x] / q[row, x])) for i, (x, row) in enumerate(zip(draft.tokens, rows))]
        want: dict[tuple, float] = defaultdict(float)
        for j in range(DEPTH):
            res = residual_distribution(r[j], q[rows[j]])
            for t in range(VOCAB):
                want[(tuple(draft.tokens[:j]), t)] += math.prod(a[:j]) * (1 - a[j]) * float(res[t])
        want[(tuple(draft.tokens), NO_TOKEN)] += math.prod(a)  # spec["chain"]: the leaf's r is unknown
        assert max(abs(got.get(o, 0.0) - p) for o, p in want.items()) < 1e-12
        assert abs(sum(got.values()) - 1) < 1e-12
