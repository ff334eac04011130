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
on the tokenizer's pretokenizer or merges.

Forwards: the model's law after a token path is computed once and kept (`known`) while the path can
still matter. The open paths of a step are scored in one forward, as a token tree (tree.py) after the
longest token prefix all hypotheses share, which stays in the member's KV cache. `laws_along(bytes)`
gives the laws at every position of a byte string not yet emitted (a draft) in one forward per token
level, not one per byte: what speculation over bytes verifies with.

`prune` drops a boundary hypothesis (a tokenization that would need a forward) whose weight is below
that fraction of the total (0: none, exact). Partial tokens cost no forward and are never dropped. The
mass dropped is counted (`stats.pruned`, summed over steps: a bound on the total-variation error).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from ..kernels import MAX_ROWS
from ..member import Member
from ..tree import ROOT, DraftTree
from .vocabulary import END, N_SYMBOLS, TokenBytes

Path = tuple[int, ...]  # generated tokens after the prompt's


@dataclass
class Partial:
    path: Path  # the tokens before the straddling one
    offset: int  # bytes of the straddling tokens already emitted
    ids: torch.Tensor  # [k] straddling tokens that agree so far (each longer than offset)
    weights: torch.Tensor  # float64 [k]


@dataclass
class Covers:
    """The hypotheses after some bytes: boundary (path -> weight) and partial groups; weights sum to 1."""

    boundary: dict[Path, float]
    partials: list[Partial]

    def paths(self) -> list[Path]:
        return list(self.boundary) + [p.path for p in self.partials]


@dataclass
class ByteStats:
    forwards: int = 0
    bytes: int = 0
    most_hypotheses: int = 0
    pruned: float = 0.0  # Σ over steps of the relative weight dropped
    revived: int = 0  # bytes this member gave probability 0 (pruning), after which it restarted (_revive)


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

    # -- the text so far ------------------------------------------------------------------------------
    def start(self, prompt_ids: Sequence[int]) -> None:
        """A new text after the prompt's tokens (the model's own tokenization of the prompt)."""
        if not prompt_ids:
            raise ValueError(f"{self.name}: an empty prompt: give at least one token (a BOS token will do)")
        self.prompt = [int(t) for t in prompt_ids]
        self.member.prefill(torch.tensor(self.prompt))
        self.covers = Covers({(): 1.0}, [])
        self.known: dict[Path, torch.Tensor] = {}  # path -> float64 [V], the model's next-token law
        self.folded: dict[Path, torch.Tensor] = {}  # path -> float64 [258], that law by first symbol
        self.base: Path = ()  # the path committed in the member's cache after the prompt
        self.tree, self.nodes = DraftTree(), {}  # the scored paths past base, cached as a token tree
        self.ended = False
        self.text = b""
        self.stats = ByteStats()

    def distribution(self) -> torch.Tensor:
        """P(next symbol | the bytes so far), float64 [257] (256 bytes, then END)."""
        if self.ended:
            raise RuntimeError(f"{self.name}: the text has ended; start a new one")
        self._score(self._open(self.covers))
        return self._law(self.covers)

    def advance(self, symbol: int) -> None:
        """Emit `symbol` (a byte value or END): keep the hypotheses that agree with it."""
        law = self.distribution()
        self.stats.bytes += 1
        if symbol == END:
            self.ended = True
            return
        if not self.vocab.starting[symbol].numel():
            raise ValueError(f"{self.name}: no token of its vocabulary spells byte {symbol}: it cannot follow a "
                             f"text holding it (byte-level BPE vocabularies spell every byte)")
        self.text += bytes([symbol])
        if not law[symbol] > 0:  # pruning dropped every tokenization that reads it (never with prune 0)
            self._revive()
            return
        self.covers, dropped = self._step(self.covers, symbol)
        self.stats.pruned += dropped
        count = len(self.covers.boundary) + sum(p.ids.numel() for p in self.covers.partials)
        self.stats.most_hypotheses = max(self.stats.most_hypotheses, count)
        self._forget()

    def _revive(self) -> None:
        """After a byte this member gave probability 0 (another member's, under pruning): continue from
        one tokenization of the text, its longest-match spelling. From here on the law is the model's given
        that spelling, not the marginal: counted in `stats.revived`; lower prune to avoid it."""
        self.stats.revived += 1
        self.covers = Covers({tuple(self.vocab.longest_match(self.text)): 1.0}, [])
        self._forget()

    # -- ahead of the text ----------------------------------------------------------------------------
    def laws_along(self, symbols: Sequence[int]) -> torch.Tensor:
        """The laws [m + 1, 257] before each of `symbols` and after the last (m = len(symbols)), emitting
        nothing. One forward per token level: each walk scores every open path it meets. Stops at END or
        at a symbol of probability 0: rows up to the law before it, none after."""
        if self.ended:
            raise RuntimeError(f"{self.name}: the text has ended; start a new one")
        resume = (0, self.covers, [])
        while True:
            laws, missing, resume = self._walk(symbols, resume)
            if not missing:
                return torch.stack(laws)
            self._score([path for path, _ in missing], [self._guess(path, symbols[at:]) for path, at in missing])

    def draft(self, n_bytes: int, greedy: bool, generator: torch.Generator | None) -> list[int]:
        """Up to n_bytes symbols drawn from this member's byte-level law (greedy: its likeliest cover
        continued by argmax tokens): a cover of the text so far is drawn by weight, then tokens after it,
        so the bytes follow `laws_along`'s laws. Ends early at END."""
        self.distribution()
        path, out = self._pick_cover(greedy, generator)
        while len(out) < n_bytes:
            probs = self._probs(path)
            token = int(probs.argmax()) if greedy else int(torch.multinomial(probs, 1, generator=generator))
            if token in self.vocab.end_ids:
                return out + [END]
            out += list(self.vocab.pieces[token])
            path += (token,)
        return out[:n_bytes]

    # -- one step of the hypotheses (pure, given the known laws) --------------------------------------
    def _open(self, covers: Covers) -> list[Path]:
        return [p for p in covers.boundary if p not in self.known]

    def _law(self, covers: Covers) -> torch.Tensor:
        mass = torch.zeros(N_SYMBOLS + 1, dtype=torch.float64)
        for path, weight in covers.boundary.items():
            mass += weight * self.folded[path]
        for p in covers.partials:
            mass.index_add_(0, self.vocab.table[p.ids, p.offset].long(), p.weights)
        mass = mass[:N_SYMBOLS]
        return mass / mass.sum()

    def _step(self, covers: Covers, symbol: int) -> tuple[Covers, float]:
        """The covers after one more byte (every boundary path's law must be known), and the relative
        weight pruning dropped."""
        out = Covers({}, [])
        starting = self.vocab.starting[symbol]
        for path, weight in covers.boundary.items():  # the next token starts with this byte
            self._split(out, path, 0, starting, weight * self.known[path][starting])
        for p in covers.partials:
            agree = self.vocab.table[p.ids, p.offset] == symbol
            self._split(out, p.path, p.offset, p.ids[agree], p.weights[agree])
        return self._renormalised(out)

    def _split(self, out: Covers, path: Path, offset: int, ids, weights) -> None:
        """Tokens that agree with one more byte: those it completes become boundary hypotheses."""
        done = self.vocab.lengths[ids] == offset + 1
        for t, w in zip(ids[done].tolist(), weights[done].tolist()):
            out.boundary[path + (t,)] = w
        if not done.all():
            out.partials.append(Partial(path, offset + 1, ids[~done], weights[~done]))

    def _renormalised(self, covers: Covers) -> tuple[Covers, float]:
        total = sum(covers.boundary.values()) + sum(float(p.weights.sum()) for p in covers.partials)
        if total == 0:
            return covers, 0.0
        dropped = 0.0
        if self.prune > 0:
            kept = {path: w for path, w in covers.boundary.items() if w >= self.prune * total}
            dropped = sum(covers.boundary.values()) - sum(kept.values())
            covers.boundary = kept
        rest = total - dropped
        return Covers({path: w / rest for path, w in covers.boundary.items()},
                      [Partial(p.path, p.offset, p.ids, p.weights / rest) for p in covers.partials]), dropped / total

    def _walk(self, symbols: Sequence[int], resume: tuple[int, Covers, list]):
        """Laws along `symbols` from the known ones, the open paths met on the way with the index of the
        symbol after each (branches the walk could not follow: their laws are the next forward's), and
        where the next walk can resume: the first position with an open path (what comes before it
        depends on known laws only)."""
        start, covers, laws = resume
        laws, missing = list(laws), []
        for i in range(start, len(symbols) + 1):
            open_ = self._open(covers)
            if open_:
                if not missing:
                    resume = (i, covers, list(laws))
                missing += [(path, i) for path in open_]
                covers = Covers({p: w for p, w in covers.boundary.items() if p in self.known}, covers.partials)
            if not missing:
                laws.append(self._law(covers))
                if i < len(symbols) and (symbols[i] == END or not laws[-1][symbols[i]] > 0):
                    break
            if i == len(symbols) or symbols[i] == END:
                break
            covers, _ = self._step(covers, symbols[i])
            if not covers.boundary and not covers.partials:
                break
        return laws, missing, resume

    # -- the model --------------------------------------------------------------------------------------
    def _probs(self, path: Path) -> torch.Tensor:
        if path not in self.known:
            self._score([path])
        return self.known[path]

    def _guess(self, path: Path, ahead: Sequence[int]) -> Path:
        """path and the tokens that likely follow it along the symbols ahead (longest match): scored in
        the same forward, they spare the next walks a forward per token."""
        data = bytes(s for s in ahead if s != END)
        return path + tuple(self.vocab.longest_match(data))

    def _score(self, paths: list[Path], guesses: Sequence[Path] = ()) -> None:
        """The model's law after each path, and after the prefixes of the guesses that fit: forwards over
        the new nodes of the member's cached token tree, MAX_ROWS at a time (the row-invariant kernels'
        block, which costs about a one-token step; past it torch's GEMM runs, several times slower here).
        Guesses only fill the last forward's free rows."""
        if not paths:
            return
        self._rebase(paths)
        if self.base in paths or self.member.n_cached < len(self.prompt) + len(self.base):
            self._forward(root=True)  # the root row (and any nodes already laid out)
        batch = []
        for path in paths:
            for node in self._new_nodes(path):
                batch.append(node)
                if len(batch) == MAX_ROWS:
                    self._forward(root=False)
                    batch = []
        if batch:
            for guess in guesses:
                over = len(batch) + len(self._new_nodes(guess, add=False)) - MAX_ROWS
                batch += self._new_nodes(guess[: len(guess) - max(over, 0)])  # as much of it as fits
            self._forward(root=False)

    def _new_nodes(self, path: Path, add: bool = True) -> list[Path]:
        """The prefixes of path past base that are not tree nodes yet (added unless add=False)."""
        new, parent = [], ROOT
        for depth in range(len(self.base), len(path)):
            key = path[: depth + 1]
            if key not in self.nodes:
                new.append(key)
                if add:
                    self.nodes[key] = self.tree.add(path[depth], parent)
            parent = self.nodes.get(key, ROOT)
        return new

    def _forward(self, root: bool) -> None:
        """Feed the tree's nodes the member has not cached (root: the whole tree after the root row) and
        keep their laws."""
        first = 0 if root else self.member.tree_cached
        if not root and first == len(self.tree):
            return
        seq = torch.tensor(self.prompt + list(self.base))
        if root and not len(self.tree):
            rows = self.member.score(seq, 1)
        else:
            rows = self.member.score_tree(seq, self.tree, root=root)
        self.stats.forwards += 1
        laws = rows.float().masked_fill(~self.vocab.generated, float("-inf")).softmax(-1).double()
        by_index = {i: path for path, i in self.nodes.items()}
        fed = ([self.base] if root else []) + [by_index[i] for i in range(first, len(self.tree))]
        for path, law in zip(fed, laws):
            if path not in self.known:
                self.known[path] = law
                self.folded[path] = torch.zeros(N_SYMBOLS + 1, dtype=torch.float64).index_add_(0, self.vocab.first, law)

    def _rebase(self, wanted: list[Path]) -> None:
        """Commit the token prefix every live hypothesis shares (the tree's nodes along it become cached
        positions) and drop the nodes no live or known path goes through."""
        live = self.covers.paths()
        shared = _common_prefix(live + wanted)
        if shared[: len(self.base)] != self.base:  # a revival left the committed path: start the tree over
            self.base = _common_prefix([self.base, shared])
            self.member.rollback(len(self.prompt) + len(self.base))
            self.tree, self.nodes = DraftTree(), {}
        chain = []
        for depth in range(len(self.base), len(shared)):
            node = self.nodes.get(shared[: depth + 1])
            if node is None:
                break
            chain.append(node)
        reached = live + wanted + list(self.known)
        kept = [i for path, i in self.nodes.items()
                if i not in chain and any(p[: len(path)] == path for p in reached)]
        if not chain and len(self.nodes) - len(kept) < 16:
            return
        kept.sort()
        self.member.keep_tree(chain + kept, len(chain))
        self.base = shared[: len(self.base) + len(chain)]
        paths = {i: path for path, i in self.nodes.items()}
        self.tree, self.nodes = DraftTree(), {}
        for i in kept:
            path = paths[i]
            self.nodes[path] = self.tree.add(path[-1], ROOT if path[:-1] == self.base else self.nodes[path[:-1]])

    def _forget(self) -> None:
        """Drop the laws of paths no live hypothesis can reach any more."""
        live = self.covers.paths()
        self.known = {path: law for path, law in self.known.items()
                      if any(path[: len(p)] == p for p in live)}
        self.folded = {path: self.folded[path] for path in self.known}

    def _pick_cover(self, greedy: bool, generator) -> tuple[Path, list[int]]:
        """A cover of the text so far, by weight (greedy: the heaviest): its path and the bytes its last
        token has still to emit."""
        paths = list(self.covers.boundary)
        weights = [torch.tensor(list(self.covers.boundary.values()), dtype=torch.float64)]
        weights += [p.weights for p in self.covers.partials]
        flat = torch.cat(weights)
        i = int(flat.argmax()) if greedy else int(torch.multinomial(flat, 1, generator=generator))
        if i < len(paths):
            return paths[i], []
        i -= len(paths)
        for p in self.covers.partials:
            if i < p.ids.numel():
                token = int(p.ids[i])
                return p.path + (token,), list(self.vocab.pieces[token][p.offset:])
            i -= p.ids.numel()
        raise AssertionError("index past the covers")


def _common_prefix(paths: list[Path]) -> Path:
    first = min(paths, key=len)
    for i, token in enumerate(first):
        if any(p[i] != token for p in paths):
            return first[:i]
    return first
