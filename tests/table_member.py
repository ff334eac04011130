"""A member whose logits come from small random tables instead of a transformer.

Same interface as `cos.member.Member` (score / rollback / prefill / statistics), a thousand times
cheaper, so Monte Carlo tests can afford tens of thousands of generations. The logits predicting
token i depend on token i-1 and on the position, so conditionals differ from step to step.
"""

from __future__ import annotations

import torch

from cos.member import Member, MemberStats
from cos.schedule import CallCosts


class TableMember(Member):
    def __init__(self, seed: int, vocab: int = 4, scale: float = 2.0, name: str = "table") -> None:
        gen = torch.Generator().manual_seed(seed)
        self.by_token = scale * torch.randn(vocab, vocab, generator=gen)  # [prev token, V]
        self.by_position = scale * torch.randn(3, vocab, generator=gen)  # [position % 3, V]
        self.name, self.device, self.vocab_size = name, torch.device("cpu"), vocab
        self.max_positions, self.n_params = None, 1000 + seed
        self.costs = CallCosts()  # never timed: the adaptive schedule then keeps γ (tests force lengths instead)
        self.row_invariance = None  # a table lookup gives a row the same bits in any block
        self.reset()

    def reset(self) -> None:
        self.n_cached, self.tree_cached, self.stats = 0, 0, MemberStats()

    def prefill(self, prompt: torch.Tensor) -> None:
        self.reset()
        self.n_cached = prompt.shape[0] - 1

    def rollback(self, n: int) -> None:
        self.n_cached, self.tree_cached = min(self.n_cached, n), 0

    def logits_at(self, seq: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """Logits [len(index), V] predicting seq position `index` from seq[: index]."""
        return self.by_token[seq[index - 1]] + self.by_position[index % 3]

    def score(self, seq: torch.Tensor, n: int = 1) -> torch.Tensor:
        length = seq.shape[0]
        self.rollback(length - n)
        self.stats.calls += 1
        self.stats.tokens += length - self.n_cached
        self.n_cached = length
        return self.logits_at(seq, torch.arange(length - n + 1, length + 1))

    def score_tree(self, seq: torch.Tensor, tree, root: bool) -> torch.Tensor:
        """Member.score_tree's contract: the row after each node's path (and the root row when asked)."""
        length = seq.shape[0]
        first = 0 if root else self.tree_cached
        if root:
            self.rollback(length - 1)
        assert root or self.n_cached == length, (self.n_cached, length)
        prev = ([int(seq[-1])] if root else []) + tree.tokens[first:]
        index = ([length] if root else []) + [length + d for d in tree.depths[first:]]
        self.stats.calls += 1
        self.stats.tokens += length - self.n_cached + len(tree) - first
        self.n_cached, self.tree_cached = length, len(tree)
        return self.by_token[torch.tensor(prev, dtype=torch.long)] + self.by_position[torch.tensor(index) % 3]

    def accept_tree(self, path: list[int]) -> None:
        self.n_cached += sum(1 for i in path if i < self.tree_cached)
        self.tree_cached = 0

    def keep_tree(self, nodes: list[int], commit: int) -> None:
        assert all(i < self.tree_cached for i in nodes), (nodes, self.tree_cached)
        self.n_cached += commit
        self.tree_cached = len(nodes) - commit
