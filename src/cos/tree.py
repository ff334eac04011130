"""A draft tree: tokens after the committed text, each with a parent, verified in one forward.

Nodes are numbered in topological order (a parent before its children); parent -1 is the root, the
position after the committed text (its distribution predicts the first level). A member lays the tree
out in its KV cache right after the committed prefix, node i at slot prefix + i, and each node attends
to the prefix, its ancestors and itself (`attention_mask`), at position prefix + depth - 1
(`position_ids`): the same keys and positions the node's path would have as a chain, so with
row-invariant kernels (kernels/) its logits are bitwise those of one-token steps along the path.
After verification the accepted path is compacted into place (kv_cache.compact) and the rest dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

ROOT = -1


@dataclass
class DraftTree:
    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)  # ROOT or an earlier node
    depths: list[int] = field(default_factory=list)  # 1 for the root's children

    def __len__(self) -> int:
        return len(self.tokens)

    def add(self, token: int, parent: int) -> int:
        """Append a node (its parent must exist already); returns its index."""
        assert parent == ROOT or 0 <= parent < len(self.tokens), (parent, len(self.tokens))
        self.tokens.append(int(token))
        self.parents.append(parent)
        self.depths.append(1 if parent == ROOT else self.depths[parent] + 1)
        return len(self.tokens) - 1

    def child(self, parent: int, token: int) -> int | None:
        """The node for `token` under `parent`, if the tree has one."""
        for i in range(parent + 1, len(self.tokens)):
            if self.parents[i] == parent and self.tokens[i] == token:
                return i
        return None

    def path(self, node: int) -> list[int]:
        """Nodes from the root's child down to `node`."""
        out = []
        while node != ROOT:
            out.append(node)
            node = self.parents[node]
        return out[::-1]

    def path_tokens(self, node: int) -> list[int]:
        return [self.tokens[i] for i in self.path(node)]

    @property
    def depth(self) -> int:
        return max(self.depths, default=0)


def attention_inputs(tree: DraftTree, prefix: int, chain_from: int, first: int, keys: int,
                     device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(mask [1, 1, M, keys] bool, position ids [1, M]) for a forward that feeds the committed tokens at
    positions chain_from..prefix-1 (causal rows) and then tree nodes first..len(tree)-1, into a cache that
    holds positions 0..chain_from-1 (and, when chain_from == prefix, tree nodes 0..first-1 after them).
    `keys`: the number of key columns attention sees (the cache's length after the forward, or a static
    cache's capacity); columns past the valid ones stay False."""
    n_chain, n_nodes = prefix - chain_from, len(tree) - first
    mask = torch.zeros(n_chain + n_nodes, keys, dtype=torch.bool)
    for j in range(n_chain):
        mask[j, : chain_from + j + 1] = True
    for row, node in enumerate(range(first, len(tree)), start=n_chain):
        mask[row, :prefix] = True
        for i in tree.path(node):
            mask[row, prefix + i] = True
    positions = list(range(chain_from, prefix)) + [prefix + tree.depths[i] - 1 for i in range(first, len(tree))]
    return mask[None, None].to(device), torch.tensor([positions], device=device)
