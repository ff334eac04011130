"""A proposer drafts a token tree level by level (docs/algorithm.md §4.6): one forward per level.

`TreeShape(nodes, width)`: at most `width` nodes per level, `ceil(nodes / width)` levels. Each level
costs the proposer one forward over its nodes (a few rows cost about one step with the row kernels),
so a tree of depth D costs what a chain of D drafts costs and offers `width` candidates per position.

Which nodes get children, and how many, is chosen from the proposer's own path probabilities (the
product of its probabilities along a node's path, EAGLE-2's score):
- greedy: every node of a level proposes its top-`width` tokens; the `width` best by path score are kept
  (the verdict is argmax r, so any tree is exact);
- sampling: the level's `width` draws are shared among the best nodes in proportion to their path
  probability BEFORE anything is drawn, then each node draws its share from its own q:
  - `children="distinct"` (the default): without replacement. Each draw comes from q with the node's
    earlier draws removed and renormalised, and that row is the trial's q, so acceptance_tree.py's walk
    is recursive rejection sampling (Jeon et al. 2024): no slot is spent on a duplicate, and a rejected
    sibling's token has no mass left in the residual either. A node whose q has no mass left (top-k /
    top-p) stops drawing: a choice made from its earlier draws only, before the next one.
  - `children="iid"`: i.i.d. from q (SpecInfer). A token drawn twice under one node is one node of the
    tree and two trials: the siblings are independent draws from q given everything before them.
  Either way every trial's token is drawn from its row given everything before it, which is what the
  walk needs to be exact. Choices that depend on the value of the draw being made (keeping the likeliest
  draws, dropping a duplicate after it was drawn) would break it, so none is made.
`lookup` > 0 adds a free branch (prompt lookup, as transformers' `prompt_lookup_num_tokens`): the tokens that
followed the latest earlier occurrence of the last few tokens of prompt + output, one more trial per slot
with a one-hot q (they depend on the context alone). It costs no proposer step, only rows: the verifiers
score it with the tree, and the proposer feeds it with its first level (Naive-CoS and CoS need the
proposer's logits there for r).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from .member import Member
from .sampling import SamplingParams, pick, to_probs
from .tree import ROOT, DraftTree

MAX_NODES = 15  # a tree verify feeds the root token and the nodes: 16 rows, what the row kernels cover
AUTO_SHAPE = (7, 2)  # `tree: auto`'s tree (nodes, width): a verify pass of 8 rows, flat on the Zen 4 CPU measured
CHILDREN = ("distinct", "iid")  # how a node's sampled children are drawn: without replacement, or i.i.d.


@dataclass(frozen=True)
class TreeShape:
    nodes: int
    width: int
    lookup: int = 0  # the free branch: up to this many tokens copied from the context (0 = off)
    children: str = "distinct"  # sampled children: without replacement, or "iid"
    auto: bool = False  # `tree: auto`: a round of this tree or a chain round, whichever measures faster

    def __post_init__(self) -> None:
        if isinstance(self.nodes, bool) or not isinstance(self.nodes, int) or not 1 <= self.nodes <= MAX_NODES:
            raise ValueError(f"tree nodes must be an int in 1..{MAX_NODES} (a verify pass feeds the root token and "
                             f"the nodes, at most 16 rows), got {self.nodes!r}")
        if isinstance(self.width, bool) or not isinstance(self.width, int) or not 1 <= self.width <= self.nodes:
            raise ValueError(f"tree width must be an int in 1..nodes ({self.nodes}), got {self.width!r}")
        if isinstance(self.lookup, bool) or not isinstance(self.lookup, int) or \
                not 0 <= self.lookup <= MAX_NODES - self.nodes:
            raise ValueError(f"tree lookup must be an int in 0..{MAX_NODES - self.nodes} (nodes + lookup <= "
                             f"{MAX_NODES}: one verify pass), got {self.lookup!r}")
        if self.children not in CHILDREN:
            raise ValueError(f"tree children must be one of {', '.join(CHILDREN)} (how a node's sampled children "
                             f"are drawn: without replacement, or i.i.d.), got {self.children!r}")

    def describe(self) -> str:
        return (("auto: chain or " if self.auto else "") + f"nodes {self.nodes} width {self.width}"
                + (f" lookup {self.lookup}" if self.lookup else "") + (" iid" if self.children == "iid" else ""))

    @property
    def depth(self) -> int:
        return math.ceil(self.nodes / self.width)

    def level_size(self, level: int) -> int:
        """Nodes at level `level` (0-based): `width`, the last level what the budget leaves."""
        return min(self.width, self.nodes - level * self.width)


@dataclass
class TreeDraft:
    tree: DraftTree
    trials: list[list[tuple[int, int]]]  # per slot (0: root, i + 1: node i): (child node, q row), in order
    q: torch.Tensor | None  # [R, V] the distributions the trials were drawn from (None if greedy)
    logits: list[torch.Tensor | None] = field(default_factory=list)  # per slot: the proposer's raw logits there


def _shares(weights: list[float], total: int) -> list[int]:
    """`total` split in proportion to `weights` (largest remainders; ties to the earlier)."""
    mass = sum(weights)
    exact = [total * w / mass for w in weights]
    shares = [int(math.floor(x)) for x in exact]
    for i in sorted(range(len(weights)), key=lambda i: (-(exact[i] - shares[i]), i))[: total - sum(shares)]:
        shares[i] += 1
    return shares


def lookup_continuation(context: list[int], length: int, longest: int = 4, shortest: int = 2) -> list[int]:
    """Prompt lookup: the tokens that followed the latest earlier occurrence of the context's last n tokens
    (n from `longest` down to `shortest`), at most `length` of them; [] when nothing matches."""
    for n in range(min(longest, len(context) - 1), shortest - 1, -1):
        tail = context[-n:]
        for start in range(len(context) - n - 1, -1, -1):
            if context[start : start + n] == tail:
                return context[start + n : start + n + length]
    return []


def _add_lookup(tree, trials, score, q_rows, tokens: list[int], vocab: int, greedy: bool, device) -> None:
    """The free branch from the root: one trial per slot with a one-hot q (the tokens depend on the context
    alone, never on a draw); a token the proposer also drafted shares its node."""
    parent = ROOT
    for token in tokens:
        row = -1
        if not greedy:
            q_rows.append(torch.nn.functional.one_hot(torch.tensor(token), vocab).float().to(device))
            row = len(q_rows) - 1
        node = tree.child(parent, token)
        if node is None:
            node = tree.add(token, parent)
            trials.append([])
            score[node] = -math.inf  # never expanded by the proposer
        trials[parent + 1].append((node, row))
        parent = node


def propose_tree(member: Member, seq: torch.Tensor, shape: TreeShape, params: SamplingParams,
                 generator: torch.Generator | None, root_logits: torch.Tensor | None = None,
                 known_everywhere: bool = False) -> TreeDraft:
    """Draft a tree after seq [L]. root_logits: the member's logits at seq's last position when the caller
    already has them (its cache then holds all of seq); else one forward computes them.
    known_everywhere: r does not need the proposer's logits (sd), so the lookup branch may run past what
    the proposer feeds; otherwise it is cut where the proposer's first level forward would not feed it."""
    if root_logits is None:
        root_logits = member.score(seq, 1)[0]
    root_logits = root_logits.to(seq.device)
    tree, trials, q_rows = DraftTree(), [[]], []
    logits: list[torch.Tensor | None] = [root_logits]
    score = {ROOT: 0.0}  # log of the proposer's probability of each node's path
    frontier = [ROOT]
    for level in range(shape.depth):
        size = shape.level_size(level)
        frontier = sorted(frontier, key=lambda f: -score[f])[:size]
        first = len(tree)
        if params.greedy:
            _children_greedy(tree, trials, logits, score, frontier, size)
        else:
            _children_sampled(tree, trials, logits, score, frontier, size, q_rows, params, generator,
                              shape.children == "distinct")
        if level == 0 and shape.lookup:  # fed with the first level, so r is known along it
            fed = shape.depth > 1 or known_everywhere
            copied = lookup_continuation(seq.tolist(), shape.lookup if fed else 1)
            _add_lookup(tree, trials, score, q_rows, copied, root_logits.shape[-1], params.greedy, seq.device)
        new = list(range(first, len(tree)))
        if level + 1 < shape.depth:  # the last level's nodes are leaves: the proposer never feeds them
            rows = member.score_tree(seq, tree, root=False).to(seq.device)
            logits.extend(rows[j] for j in range(len(new)))
        else:
            logits.extend(None for _ in new)
        frontier = new
    return TreeDraft(tree, trials, torch.stack(q_rows) if q_rows else None, logits)


def _children_greedy(tree, trials, logits, score, frontier, size) -> None:
    """Each frontier node's top-`size` tokens; keep the `size` best by path score."""
    candidates = []
    for f in frontier:
        logp = logits[f + 1].float().log_softmax(-1)
        top = logp.topk(size)
        candidates += [(score[f] + float(v), f, int(t)) for v, t in zip(top.values, top.indices)]
    for s, f, token in sorted(candidates, key=lambda c: -c[0])[:size]:
        node = tree.add(token, f)
        trials[f + 1].append((node, -1))
        trials.append([])
        score[node] = s


def _children_sampled(tree, trials, logits, score, frontier, size, q_rows, params, generator, distinct) -> None:
    """`size` draws shared among the frontier by path probability, fixed before any draw; each node's
    share drawn without replacement (distinct) or i.i.d., every trial with the row it was drawn from."""
    best = max(score[f] for f in frontier)
    for f, share in zip(frontier, _shares([math.exp(score[f] - best) for f in frontier], size)):
        if share == 0:
            continue
        q = to_probs(logits[f + 1], params)
        row = q
        for draw in range(share):
            if draw == 0 or distinct:
                q_rows.append(row)
            token = int(pick(row, False, generator))
            node = tree.child(f, token)
            if node is None:
                node = tree.add(token, f)
                trials.append([])
                score[node] = score[f] + math.log(max(float(q[token]), 1e-30))
            trials[f + 1].append((node, len(q_rows) - 1))
            if distinct:  # the next draw: q without this node's draws so far, renormalised
                row = row.clone()
                row[token] = 0
                mass = row.sum()
                if not mass > 0:
                    break
                row = row / mass
