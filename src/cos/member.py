"""A member: one causal LM with its own KV cache, on its own device (ALGORITHM.md §5).

The cache holds keys/values for a prefix of the current token sequence; `n_cached` counts the valid
positions. `score(seq, n)` returns the member's logits at the last n positions of `seq` plus the
next one, feeding every token from its first invalid position (catch-up, pending, its own context).
`rollback(n)` drops everything past n tokens. Invariant (tested): after any sequence of scores and
rollbacks, the returned logits equal a fresh forward over the same tokens.

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

from .kv_cache import is_preallocated, make_cache
from .schedule import CallCosts
from .threads import ThreadPolicy


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
                 threads: ThreadPolicy | None = None) -> None:
        """cache: preallocated (falls back to dynamic where the model needs it) | dynamic.
        threads: the engine's shared policy; None leaves torch's thread count alone."""
        self.model = model.eval()
        self.name = name
        self.device = next(model.parameters()).device
        self.vocab_size = model.get_output_embeddings().weight.shape[0]
        self.max_positions = getattr(model.config, "max_position_embeddings", None)
        self.n_params = sum(p.numel() for p in model.parameters())
        self.threads = threads or ThreadPolicy(None)
        self.costs = CallCosts()
        self.cache = make_cache(model.config, kind=cache)
        self.reset()

    def reset(self) -> None:
        """Empty the cache (keeping a preallocated one's buffers) and the statistics (a new request)."""
        if is_preallocated(self.cache):
            self.cache.reset()
        else:
            self.cache = make_cache(self.model.config, kind="dynamic")
        self.n_cached = 0
        self.stats = MemberStats()

    @torch.inference_mode()
    def prefill(self, prompt: torch.Tensor) -> None:
        """Cache all prompt tokens but the last (fed by the first decoding step), off the statistics."""
        self.reset()
        if prompt.shape[0] > 1:
            self.threads.choose((self.name, "prefill"))
            self.model(input_ids=prompt[None, :-1].to(self.device), past_key_values=self.cache, use_cache=True,
                       logits_to_keep=1)
            self.n_cached = prompt.shape[0] - 1

    def rollback(self, n: int) -> None:
        """Keep only the first n cached positions (a no-op if fewer are cached)."""
        if n < self.n_cached:
            self.cache.crop(n - self.n_cached)  # negative: drop that many (transformers >= 4.4x)
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
        kind = (self.name, min(fed.shape[0], 16))
        threads = self.threads.choose(kind)
        start = self._clock()
        out = self.model(input_ids=fed[None], past_key_values=self.cache, use_cache=True, logits_to_keep=n)
        seconds = self._stop_clock(start, fed.shape[0])
        if seconds is not None:
            self.threads.observe(kind, threads, seconds)
            self.costs.observe(fed.shape[0], seconds)
        self.n_cached = length
        return out.logits[0, -n:]  # [n, V]

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
