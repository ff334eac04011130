"""A member: one causal LM with its own KV cache, on its own device (docs/algorithm.md §5).

The cache holds keys/values for a prefix of the current token sequence; `n_cached` counts the valid
positions. `score(seq, n)` returns the member's logits at the last n positions of `seq` plus the
next one, feeding every token from its first invalid position (catch-up, pending, its own context).
`rollback(n)` drops everything past n tokens. Invariant (tested): after any sequence of scores and
rollbacks, the returned logits equal a fresh forward over the same tokens.

Draft trees (tree.py): `score_tree(seq, tree, root)` lays the tree's nodes out after seq in the cache and
returns their logits (each node sees seq and its ancestors), `accept_tree(path)` compacts the accepted
path into place. The invariant extends: after a tree verify and compaction, logits equal a fresh
forward over the accepted path.

The runtime around each forward: a preallocated KV cache (kv_cache.py; a rollback moves a length),
the CPU thread policy (threads.py, shared by the members of an engine), and `costs`, the moving-average
seconds per forward by tokens fed, which the adaptive schedule (schedule.py) reads. `costs` outlives a
request; `stats` does not.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
from transformers import PreTrainedModel

from .kernels import MAX_ROWS, row_invariance
from .kv_cache import compact, empty, is_preallocated, is_static, make_cache, truncate
from .costs import CallCosts
from .threads import ThreadPolicy
from .tree import DraftTree, attention_inputs


@dataclass
class MemberStats:
    """Forward calls, tokens forwarded and time spent by one member (so c is measured)."""

    calls: int = 0
    tokens: int = 0
    seconds: float = 0.0
    _events: list = field(default_factory=list, repr=False)  # CUDA (start, end) pairs, read at the end

    def finish(self, costs: CallCosts) -> None:
        """Read pending CUDA timings (one sync, at the end of a generation) into the totals and costs."""
        if self._events:
            self._events[-1][1].synchronize()
            for start, end, n_tokens in self._events:
                seconds = start.elapsed_time(end) / 1000.0
                self.seconds += seconds
                costs.observe(n_tokens, seconds)
            self._events.clear()

    @property
    def seconds_per_call(self) -> float:
        return self.seconds / self.calls if self.calls else 0.0


class Member:
    """A causal LM with a KV cache. `name` is for logs; `device` is where its weights live."""

    def __init__(self, model: PreTrainedModel, name: str = "member", cache: str = "preallocated",
                 threads: ThreadPolicy | None = None, compile: bool = False, capacity: int = 4096) -> None:
        """cache: preallocated (falls back to dynamic where the model needs it) | dynamic | static
        (transformers' StaticCache of `capacity` positions, fixed shapes for captured forwards).
        compile: decode forwards (up to 16 tokens fed) run through torch.compile, with CUDA graphs on
        CUDA (mode reduce-overhead; needs cache=static); prefill stays eager. Graphs are captured at the
        first call of each length: `warm_up` does that ahead of timed generation.
        threads: the engine's shared policy; None leaves torch's thread count alone."""
        self.model = model.eval()
        self.name = name
        self.device = next(model.parameters()).device
        self.vocab_size = model.get_output_embeddings().weight.shape[0]
        self.max_positions = getattr(model.config, "max_position_embeddings", None)
        self.n_params = sum(p.numel() for p in model.parameters())
        self.threads = threads or ThreadPolicy(None)
        self.costs = CallCosts()
        if compile and cache != "static":
            raise ValueError("compile=True needs fixed shapes (and CUDA graphs fixed addresses): use cache='static'")
        self.cache = make_cache(model.config, capacity=capacity, kind=cache)
        self.capacity = capacity
        self.forward = self.model
        if compile:
            mode = "reduce-overhead" if self.device.type == "cuda" else "default"
            self.forward = torch.compile(self.model, mode=mode, dynamic=False)
        self.compile_seconds = 0.0  # spent in warm_up (captures, compilation), never inside a timed generation
        # None: a block's rows are bitwise the rows of one-token steps (kernels/invariance.py); else why not
        self.row_invariance = "compiled forwards (torch.compile traces torch's ops, not the kernels)" if compile \
            else row_invariance(self.model)
        self.reset()

    def reset(self) -> None:
        """Empty the cache (keeping a preallocated one's buffers) and the statistics (a new request)."""
        if is_preallocated(self.cache) or is_static(self.cache):
            empty(self.cache)
        else:
            self.cache = make_cache(self.model.config, kind="dynamic")
        self.n_cached = 0
        self.tree_cached = 0  # draft-tree nodes held after the n_cached positions (score_tree)
        self.stats = MemberStats()

    @torch.inference_mode()
    def prefill(self, prompt: torch.Tensor) -> None:
        """Cache all prompt tokens but the last (fed by the first decoding step), off the statistics."""
        self.reset()
        if is_static(self.cache) and prompt.shape[0] + 64 > self.capacity:
            raise ValueError(f"{self.name}: a prompt of {prompt.shape[0]} tokens does not fit a static cache of "
                             f"{self.capacity} positions: raise capacity or use cache='preallocated'")
        if prompt.shape[0] > 1:
            self.threads.choose((self.name, "prefill"))
            self.model(input_ids=prompt[None, :-1].to(self.device), past_key_values=self.cache, use_cache=True,
                       logits_to_keep=1)
            self.n_cached = prompt.shape[0] - 1

    def rollback(self, n: int) -> None:
        """Keep only the first n cached positions (a no-op if fewer are cached); drops any tree nodes."""
        self._drop_tree()
        if n < self.n_cached:
            truncate(self.cache, self.n_cached, n)
            self.n_cached = n

    @torch.inference_mode()
    def score(self, seq: torch.Tensor, n: int = 1) -> torch.Tensor:
        """Logits [n, V] at positions len(seq)-n+1 .. len(seq) (row j predicts seq index L-n+1+j).

        seq [L] is the full token sequence (committed + pending). Feeds seq[n_cached:] after
        rolling back so that at least the last n tokens are fed.
        """
        length = seq.shape[0]
        assert 1 <= n <= length, (n, length)
        self.rollback(length - n)
        fed = seq[self.n_cached :].to(self.device, non_blocking=True)
        logits = self._timed(fed.shape[0], lambda: self._forward(fed, n))
        self.n_cached = length
        return logits

    def _timed(self, n_fed: int, forward):
        """Run one forward of n_fed tokens under the thread policy, counted and timed (costs, threads)."""
        kind = (self.name,)  # contention is the machine's, not a call length's: one choice per member
        threads = self.threads.choose(kind)
        start = self._clock()
        out = forward()
        seconds = self._stop_clock(start, n_fed)
        if seconds is not None:
            self.threads.observe(kind, threads, seconds, n_fed)
            self.costs.observe(n_fed, seconds)
        return out

    def _drop_tree(self) -> None:
        if self.tree_cached:
            truncate(self.cache, self.n_cached + self.tree_cached, self.n_cached)
            self.tree_cached = 0

    @torch.inference_mode()
    def score_tree(self, seq: torch.Tensor, tree: DraftTree, root: bool) -> torch.Tensor:
        """Logits at the tree's nodes laid out after seq [L] (row for node i: the distribution after its path).

        root=True: [1 + N, V], the first row at seq's last position (the root, predicting the first level),
        the tree fed whole (after rolling back so that seq's last token is fed again). root=False: the
        cache must hold all of seq and the tree's first `tree_cached` nodes (an earlier call with a smaller
        tree, the same nodes): only the new nodes are fed, [N - tree_cached, V].
        """
        length = seq.shape[0]
        if root:
            self.rollback(length - 1)
            first = 0
        else:
            assert self.n_cached == length and self.tree_cached <= len(tree), (self.n_cached, length)
            first = self.tree_cached
            if first == len(tree):
                return torch.empty(0, self.vocab_size, device=self.device)
        chain = seq[self.n_cached:]
        wanted = len(tree) - first + int(root)  # rows returned
        if chain.shape[0] > 1 and self.row_invariance is None and chain.shape[0] + len(tree) - first > MAX_ROWS:
            self._feed_decoder(chain[:-1])  # a long catch-up: through the decoder first, in kernel-sized pieces
            self.n_cached += chain.shape[0] - 1
            chain = chain[-1:]
        fed = torch.cat([chain, torch.tensor(tree.tokens[first:], dtype=seq.dtype)]).to(self.device)
        start = self.n_cached + self.tree_cached
        keys = self.capacity if is_static(self.cache) else start + fed.shape[0]
        mask, positions = attention_inputs(tree, length, self.n_cached, first, keys, self.device)
        logits = self._timed(fed.shape[0], lambda: self.model(
            input_ids=fed[None], past_key_values=self.cache, use_cache=True, attention_mask=mask,
            position_ids=positions, logits_to_keep=wanted).logits[0])
        self.n_cached, self.tree_cached = length, len(tree)
        return logits

    @torch.inference_mode()
    def accept_tree(self, path: list[int]) -> None:
        """Keep the accepted path's nodes that this member has cached (a prefix of `path`, root first) as
        the positions after the committed ones; drop the rest of the tree."""
        held = [i for i in path if i < self.tree_cached]
        assert held == path[: len(held)], (path, self.tree_cached)
        self.keep_tree(held, len(held))

    @torch.inference_mode()
    def keep_tree(self, nodes: list[int], commit: int) -> None:
        """Keep the listed cached nodes, in that order, and drop the rest of the tree: the first `commit`
        (a chain down from the root) become committed positions, the others stay a tree after them (each
        listed after its parent; the caller renumbers its DraftTree the same way). Keys keep their
        positions: a node at depth d under the old root is at depth d - commit under the new one."""
        assert all(i < self.tree_cached for i in nodes), (nodes, self.tree_cached)
        compact(self.cache, self.n_cached, [self.n_cached + i for i in nodes], self.n_cached + self.tree_cached)
        self.n_cached += commit
        self.tree_cached = len(nodes) - commit

    def _feed_decoder(self, tokens: torch.Tensor) -> None:
        """Cache `tokens` through the decoder alone (no LM head), in pieces of MAX_ROWS."""
        for begin in range(0, tokens.shape[0], MAX_ROWS):
            piece = tokens[begin : begin + MAX_ROWS][None].to(self.device)
            self.model.get_decoder()(input_ids=piece, past_key_values=self.cache, use_cache=True)

    def _forward(self, fed: torch.Tensor, n: int) -> torch.Tensor:
        """Logits [n, V] at the last n of the `fed` tokens, after the cache. A row-invariant member is fed
        more than MAX_ROWS tokens in pieces of MAX_ROWS (the pieces before the last n rows through the
        decoder alone, no LM head), so that a long catch-up gives each row the bits a one-token step gives
        it; otherwise one forward."""
        if fed.shape[0] <= MAX_ROWS or self.row_invariance is not None:
            forward = self.forward if fed.shape[0] <= MAX_ROWS else self.model
            return forward(input_ids=fed[None], past_key_values=self.cache, use_cache=True,
                           logits_to_keep=n).logits[0, -n:]
        pieces = []
        for begin in range(0, fed.shape[0], MAX_ROWS):
            piece = fed[begin : begin + MAX_ROWS][None]
            wanted = min(piece.shape[1], begin + piece.shape[1] - (fed.shape[0] - n))  # rows among the last n
            if wanted <= 0:
                self._feed_decoder(piece[0])
            else:
                pieces.append(self.model(input_ids=piece, past_key_values=self.cache, use_cache=True,
                                         logits_to_keep=wanted).logits[0])
        return torch.cat(pieces)  # [n, V]

    def _clock(self):
        if self.device.type == "cuda":
            start = torch.cuda.Event(enable_timing=True)
            start.record()
            return start
        return time.perf_counter()

    def _stop_clock(self, start, n_tokens: int) -> float | None:
        """Count the call; on CPU return its seconds (CUDA timings are read once, at the end)."""
        self.stats.calls += 1
        self.stats.tokens += n_tokens
        if self.device.type == "cuda":
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            self.stats._events.append((start, end, n_tokens))
            return None
        seconds = time.perf_counter() - start
        self.stats.seconds += seconds
        return seconds

    @torch.inference_mode()
    def warm_up(self, lengths: range | list[int], context: int = 8) -> float:
        """Run one forward per (fed length, kept logits) a method uses, on a dummy context, so that
        compilation and graph capture happen here and not in a timed generation. Returns seconds spent
        (also added to `compile_seconds`); the cache and statistics are reset after."""
        start = time.perf_counter()
        dummy = torch.zeros(context + max(lengths), dtype=torch.long)
        saved, (self.costs, self.threads) = (self.costs, self.threads), (CallCosts(), ThreadPolicy(None))
        try:  # compile times are not call costs
            for q in lengths:
                for n in sorted({1, q}):
                    self.prefill(dummy[:context])
                    self.score(dummy[: context - 1 + q], n)
        finally:
            self.costs, self.threads = saved
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.reset()
        seconds = time.perf_counter() - start
        self.compile_seconds += seconds
        return seconds
