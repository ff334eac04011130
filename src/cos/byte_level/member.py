"""A byte-level member: the exact next-byte law of the text a token-level member generates.

Sample tokens from a model after the prompt's tokens and decode them: the text starts with the bytes x
exactly when the token sequence has a *cover* of x, a prefix t_1..t_k whose bytes reach x's end or past
it while t_1..t_{k-1}'s fall short (Phan et al., ICLR 2025, the byte-token representation lemma). Covers
of one x are disjoint events, so P(text starts with x) = Σ_covers P(t_1..t_k), and the next-symbol law
is a ratio of two such sums. The member keeps the covers of the bytes so far as hypotheses, with their
probabilities renormalised to sum 1:

- a *boundary* hypothesis ends exactly at x's end: its next token is open, and the model's distribution
  after it (one forward) spreads its weight over the tokens' first bytes and END;
- a *partial* group: the tokens that straddle x's end after one token prefix, with the bytes each would
  emit next (no forward: their weights are already known).

Emitting a byte keeps the hypotheses that agree with it; a partial token whose bytes are used up becomes
a boundary hypothesis. Every tokenization of the text is counted, canonical or not, so nothing depends
on the tokenizer's pretokenizer or merges. The boundary hypotheses of one position are scored in one
forward as a token tree (tree.py) after the longest token prefix all hypotheses share, which stays in
the member's KV cache: a token of k bytes costs one forward for its k bytes.

`prune` drops hypotheses whose weight falls below that fraction of the total (0: none; exact). The
mass dropped is counted (`stats.pruned`, a bound on the total-variation error it caused).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from ..member import Member
from ..tree import ROOT, DraftTree
from .vocabulary import END, N_SYMBOLS, TokenBytes


@dataclass
class Boundary:
    path: tuple[int, ...]  # generated tokens, ending exactly at the bytes' end
    weight: float
    probs: torch.Tensor | None = None  # float64 [V]: the model's next-token law after path (generated tokens)


@dataclass
class Partial:
    path: tuple[int, ...]  # the tokens before the straddling one
    offset: int  # bytes of the straddling tokens already emitted
    ids: torch.Tensor  # [k] straddling tokens that agree so far (each longer than offset)
    weights: torch.Tensor  # float64 [k]


@dataclass
class ByteStats:
    forwards: int = 0
    bytes: int = 0
    most_hypotheses: int = 0
    pruned: float = 0.0  # Σ over steps of the relative weight dropped


@dataclass
class ByteMember:
    member: Member
    vocab: TokenBytes
    prune: float = 0.0
    name: str = field(default="")
    stats: ByteStats = field(default_factory=ByteStats)

    def __post_init__(self) -> None:
        if self.vocab.vocab_size != self.member.vocab_size:
            raise ValueError(f"{self.member.name}: a byte table of {self.vocab.vocab_size} tokens for logits of "
                             f"{self.member.vocab_size}: build TokenBytes with the model's vocab_size")
        if not 0.0 <= self.prune < 1.0:
            raise ValueError(f"prune must be in [0, 1) (0 keeps every tokenization: exact), got {self.prune}")
        self.name = self.name or self.member.name
        self.prompt: list[int] = []

    def start(self, prompt_ids: Sequence[int]) -> None:
        """A new text after the prompt's tokens (the model's own tokenization of the prompt)."""
        if not prompt_ids:
            raise ValueError(f"{self.name}: an empty prompt: give at least one token (a BOS token will do)")
        self.prompt = [int(t) for t in prompt_ids]
        self.member.prefill(torch.tensor(self.prompt))
        self.boundary = [Boundary((), 1.0)]
        self.partials: list[Partial] = []
        self.ended = False
        self._law: torch.Tensor | None = None
        self.stats = ByteStats()

    def distribution(self) -> torch.Tensor:
        """P(next symbol | the bytes so far), float64 [257] (256 bytes, then END)."""
        if self.ended:
            raise RuntimeError(f"{self.name}: the text has ended; start a new one")
        if self._law is None:
            self._score([h for h in self.boundary if h.probs is None])
            mass = torch.zeros(N_SYMBOLS + 1, dtype=torch.float64)
            for h in self.boundary:
                mass.index_add_(0, self.vocab.first, h.weight * h.probs)
            for p in self.partials:
                mass.index_add_(0, self.vocab.table[p.ids, p.offset].long(), p.weights)
            mass = mass[:N_SYMBOLS]
            self._law = mass / mass.sum()
        return self._law

    def advance(self, symbol: int) -> None:
        """Emit `symbol` (a byte value or END): keep the hypotheses that agree with it."""
        law = self.distribution()
        if not law[symbol] > 0:
            raise ValueError(f"{self.name}: symbol {symbol} has probability 0 here: it cannot be emitted")
        self._law = None
        self.stats.bytes += 1
        if symbol == END:
            self.ended = True
            return
        boundary, partials = [], []
        starting = self.vocab.starting[symbol]
        for h in self.boundary:  # the next token starts with this byte
            self._split(h.path, 0, starting, h.weight * h.probs[starting], boundary, partials)
        for p in self.partials:
            agree = self.vocab.table[p.ids, p.offset] == symbol
            self._split(p.path, p.offset, p.ids[agree], p.weights[agree], boundary, partials)
        self.boundary, self.partials = boundary, partials
        self._renormalise()

    def _split(self, path, offset, ids, weights, boundary: list, partials: list) -> None:
        """Tokens that agree with one more byte: those it completes become boundary hypotheses."""
        done = self.vocab.lengths[ids] == offset + 1
        boundary.extend(Boundary(path + (int(t),), float(w)) for t, w in zip(ids[done].tolist(), weights[done]))
        if not done.all():
            partials.append(Partial(path, offset + 1, ids[~done], weights[~done]))

    def _renormalise(self) -> None:
        total = sum(h.weight for h in self.boundary) + sum(float(p.weights.sum()) for p in self.partials)
        cut = self.prune * total
        if cut > 0:
            kept = [h for h in self.boundary if h.weight >= cut]
            dropped = sum(h.weight for h in self.boundary) - sum(h.weight for h in kept)
            self.boundary, partials = kept, []
            for p in self.partials:
                keep = p.weights >= cut
                dropped += float(p.weights[~keep].sum())
                if keep.any():
                    partials.append(Partial(p.path, p.offset, p.ids[keep], p.weights[keep]))
            self.partials = partials
            self.stats.pruned += dropped / total
            total -= dropped
        for h in self.boundary:
            h.weight /= total
        for p in self.partials:
            p.weights = p.weights / total
        count = len(self.boundary) + sum(p.ids.numel() for p in self.partials)
        self.stats.most_hypotheses = max(self.stats.most_hypotheses, count)

    def _score(self, open_: list[Boundary]) -> None:
        """The model's next-token law after each open boundary hypothesis: one forward for all of them, a
        token tree laid after the prefix that every live hypothesis shares."""
        if not open_:
            return
        shared = _common_prefix([h.path for h in self.boundary] + [p.path for p in self.partials])
        seq = torch.tensor(self.prompt + list(shared))
        if len(open_) == 1 and open_[0].path == shared:
            rows, where = self.member.score(seq, 1), [0]
        else:
            tree, node = DraftTree(), {}
            for h in open_:
                parent = ROOT
                for depth in range(len(shared), len(h.path)):
                    key = h.path[: depth + 1]
                    if key not in node:
                        node[key] = tree.add(h.path[depth], parent)
                    parent = node[key]
            rows = self.member.score_tree(seq, tree, root=True)
            where = [0 if h.path == shared else 1 + node[h.path] for h in open_]
        self.stats.forwards += 1
        logits = rows.double().masked_fill(~self.vocab.generated, float("-inf"))
        for h, row in zip(open_, where):
            h.probs = logits[row].softmax(-1)


def _common_prefix(paths: list[tuple[int, ...]]) -> tuple[int, ...]:
    first = min(paths, key=len)
    for i, token in enumerate(first):
        if any(p[i] != token for p in paths):
            return first[:i]
    return first
