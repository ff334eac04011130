"""Tree rounds for `sd`, Naive-CoS (`*_sd`) and CoS (`*_chef`) (docs/algorithm.md §4.6).

One round: the proposer drafts a token tree (tree_draft.py, one forward per level), every verifier
scores the whole tree in one forward (each node sees the committed text and its ancestors), r is
formed at every position where all its members' logits are known, and the tree is walked with the
exact tree acceptance rule (acceptance_tree.py). Every member then compacts the accepted path into
place in its cache (Member.accept_tree) and drops the rest.

Where the walk stops on a node whose r is not known (the proposer never fed the tree's last level):
- `sd`: never (r is the target's alone, known at every node): a bonus token is drawn there;
- Naive-CoS, bonus none: nothing more is emitted (the paper's Naive-CoS);
- Naive-CoS, bonus exact: the verifiers' rows there are carried; the next round's first proposer
  forward completes r there and a token is drawn from it (§4.1), before the next tree;
- CoS: the verifier group draws its own token t there from its proposal q_v (`Combination.proposal`:
  for two members the verifier's p_v) and keeps it pending; the next round's first proposer forward
  feeds t, giving both the proposer's row at t's position (r there: t is verified against it with q_v,
  like any draft) and its row after t (the next tree's root), so the alternate proposal costs no
  proposer forward (§4.2). A rejected t ends the round with its residual.
Every emitted token is an accepted draft, a residual, or a draw from r: exact (greedy: argmax r).
"""

from __future__ import annotations

import torch

from ..acceptance import NO_TOKEN, verify_block
from ..acceptance_tree import verify_tree
from ..sampling import pick
from ..tree_draft import TreeShape, propose_tree
from .state import DecodeState


class TreeLoop:
    def __init__(self, st: DecodeState, proposer: int | None, shape: TreeShape, mode: str) -> None:
        """proposer: config index into st.members, or None for st.draft_model (sd).
        mode: "sd", "naive" (no bonus), "exact" (Naive-CoS with the exact bonus) or "cos"."""
        self.st, self.p, self.shape, self.mode = st, proposer, shape, mode
        self.proposer = st.draft_model if proposer is None else st.members[proposer]
        self.verifiers = [m for i, m in enumerate(st.members) if i != proposer]
        self.carry: list[torch.Tensor] | None = None  # verifiers' rows where the last walk stopped (exact, cos)
        self.pending: tuple[int, torch.Tensor] | None = None  # cos: (t, q_v) owned by the verifier group

    @property
    def idle(self) -> bool:
        """Nothing carried into the next round (`tree: auto` may then run a chain round instead)."""
        return self.carry is None and self.pending is None

    def _members(self, proposer_row: torch.Tensor | None, verifier_rows: list[torch.Tensor]) -> list:
        rows = list(verifier_rows)
        rows.insert(self.p, proposer_row)
        return rows

    def _r(self, proposer_row: torch.Tensor, verifier_rows: list[torch.Tensor]) -> torch.Tensor:
        return self.st.r(self._members(proposer_row, verifier_rows))

    def round(self) -> list[int]:
        st, greedy = self.st, self.st.params.greedy
        start = st.seq.shape[0]
        head: list[int] = []  # tokens settled before the tree: an exact bonus, or an accepted pending t
        root_logits, verified_t = None, 0
        # 1. what the last round left where its walk stopped: complete r there with the proposer's row
        if self.carry is not None:
            if self.pending is not None:  # cos: one forward gives the row at t's position and after t
                t, q_t = self.pending
                rows = self.proposer.score(torch.cat([st.seq, st.seq.new_tensor([t])]), 2).to(st.device)
                r_t = self._r(rows[:1], [c[None] for c in self.carry])
                n_acc, nxt = verify_block(st.seq.new_tensor([t]), None if greedy else q_t[None], r_t, greedy,
                                          st.generator)
                n_acc, nxt = torch.stack([n_acc, nxt]).tolist()
                self.carry = self.pending = None
                if n_acc == 0:  # t rejected: its residual ends the round
                    st.count_round(1, 0, None)
                    return st.commit([nxt], keep_cached=start)
                head, root_logits, verified_t = [t], rows[1], 1
            else:  # exact bonus: r there is complete once the proposer computes its row
                r0 = self._r(self.proposer.score(st.seq, 1).to(st.device), [c[None] for c in self.carry])
                head = [int(pick(r0, greedy, st.generator))]
                self.carry = None
        seq = torch.cat([st.seq, st.seq.new_tensor(head)]) if head else st.seq
        if st.remaining - len(head) <= 0:  # the budget is spent: no tree this round
            if verified_t:
                st.count_round(1, 1, None)
            return st.commit(head, keep_cached=seq.shape[0])
        # 2. the proposer drafts a tree after committed + head; every verifier scores it in one forward
        draft = propose_tree(self.proposer, seq, self.shape, st.params, st.generator, root_logits,
                             known_everywhere=self.p is None)
        tree = draft.tree
        v = [m.score_tree(seq, tree, root=True).to(st.device) for m in self.verifiers]  # n_v × [1 + N, V]
        # 3. r at every slot (root, nodes) whose members' logits are all known
        slots = len(tree) + 1
        known = [self.p is None or draft.logits[s] is not None for s in range(slots)]
        r = torch.zeros(slots, v[0].shape[-1], device=st.device)
        if self.p is None:  # sd: the target's distribution, at every slot
            r = st.r(v)
        else:
            rows = [s for s in range(slots) if known[s]]
            r[rows] = self._r(torch.stack([draft.logits[s] for s in rows]), [x[rows] for x in v])
        # 4. walk the tree; every member keeps the accepted path
        path, nxt = verify_tree(torch.tensor(tree.tokens, dtype=torch.long), tree.parents, draft.trials, draft.q, r,
                                known, greedy, st.generator)
        for m in [self.proposer, *self.verifiers]:
            m.accept_tree(path)
        st.count_round(len(tree) + verified_t, len(path) + verified_t, None)
        accepted = tree.path_tokens(path[-1]) if path else []
        end = path[-1] + 1 if path else 0  # the slot where the walk stopped
        if nxt == NO_TOKEN and self.mode in ("exact", "cos") and seq.shape[0] + len(accepted) - start < st.remaining:
            self.carry = [x[end] for x in v]
            if self.mode == "cos":
                q_v = st.combination.proposal(self._members(None, [x[end:end + 1] for x in v]), st.params)
                t = int(pick(q_v, greedy, st.generator))
                self.pending = (t, q_v[0])
        emitted = head + accepted + ([nxt] if nxt != NO_TOKEN else [])
        out = st.commit(emitted, keep_cached=seq.shape[0] + len(accepted))
        if st.done:
            self.carry = self.pending = None
        return out
