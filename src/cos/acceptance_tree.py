"""The acceptance rule for a draft tree: one walk from the root, trying each slot's children in order.

At a slot (the root, or a node whose children predict the next token) with combined distribution r:
- sampling: multi-round speculative sampling (SpecInfer, Miao et al. 2024). Start with cur = r; try
  each trial x (drawn from its proposal row q_j) in order: accept with probability min(1, cur(x)/q_j(x))
  and continue at x's node; on rejection cur <- norm(max(0, cur - q_j)) and try the next one. When
  every trial is rejected, the next token is drawn from cur.
- greedy: follow the child whose token is argmax r; stop with argmax r when there is none.
A slot without trials (a leaf, or a node whose children were all dropped) ends the walk with a bonus
drawn from its r, or NO_TOKEN when its r was not computed (Naive-CoS's unexpanded leaves).

Why each trial counts separately: every round is one standard speculative step against cur, so its
emitted token is distributed as cur provided the trial's token was drawn from q_j independently of
the earlier trials at the slot (given everything before it). Two i.i.d. draws of the same token are
two trials on one node: the second is tried against the residual the first left (which has no mass
on that token, so it is always rejected, but it still moves cur), exactly as if they were different
nodes. Skipping it, or trying a sibling against r instead of the residual, biases the output.

With a chain (one trial per slot) this is `acceptance.verify_block`. Pure math: no model, no cache.
The walk is sequential, so it reads one scalar per trial on the host; the tensor work is one residual
per rejection and one draw at the end.
"""

from __future__ import annotations

import torch

from .acceptance import NO_TOKEN, residual_distribution
from .sampling import sample


def verify_tree(
    tokens: torch.Tensor,  # [N] node tokens, nodes in topological order
    parents: list[int],  # [N] parent node, -1 for the root's children
    trials: list[list[tuple[int, int]]],  # [N+1] per slot (0: root, i+1: node i): ordered (node, q row)
    q: torch.Tensor | None,  # [R, V] proposal rows the trials were drawn from (unused when greedy)
    r: torch.Tensor,  # [N+1, V] combined distribution at each slot
    r_known: list[bool],  # [N+1] whether r was computed at that slot
    greedy: bool,
    generator: torch.Generator | None,
) -> tuple[list[int], int]:
    """Verify a draft tree against r. Returns (path, next_token): the accepted nodes from the root down,
    and the token after them (a residual, a bonus, or NO_TOKEN when the final slot's r is unknown)."""
    n = tokens.shape[0]
    assert len(parents) == n and len(trials) == n + 1 and len(r_known) == n + 1, "one entry per node/slot"
    assert r.dim() == 2 and r.shape[0] == n + 1, (n, tuple(r.shape))
    assert greedy or q is not None, "sampling needs q"
    node_tokens = tokens.tolist()
    path: list[int] = []
    slot = 0  # 0 = root, i + 1 = node i
    while True:
        tried = trials[slot]
        if not tried:  # leaf: bonus from r, when it is known
            if not r_known[slot]:
                return path, NO_TOKEN
            return path, int(r[slot].argmax() if greedy else sample(r[slot], generator))
        assert r_known[slot], f"slot {slot} has trials but no r"
        assert all(parents[node] == slot - 1 for node, _ in tried), f"a trial at slot {slot} is not its child"
        cur = r[slot]
        accepted = None
        if greedy:
            target = int(cur.argmax())
            accepted = next((node for node, _ in tried if node_tokens[node] == target), None)
            if accepted is None:
                return path, target
        else:
            for node, row in tried:
                x = node_tokens[node]
                u = torch.rand((), generator=generator, device=cur.device, dtype=r.dtype)
                if bool(u * q[row, x] < cur[x]):  # P(accept) = min(1, cur(x)/q(x)), as verify_block
                    accepted = node
                    break
                cur = residual_distribution(cur, q[row])
            if accepted is None:
                return path, int(sample(cur, generator))
        path.append(accepted)
        slot = accepted + 1
