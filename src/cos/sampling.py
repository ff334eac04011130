"""Sampling semantics shared by every method: temperature, top-k, top-p, greedy.

Pure math (CONTRIBUTING.md §1): tensors and a `torch.Generator` in, tensors out. Nothing here touches a
model, a cache or the global RNG.

Greedy decoding is `temperature == 0`. Under greedy decoding distributions are still computed (with
temperature taken as 1, top-k / top-p applied as configured) because the combined distribution r is
defined on distributions; the emitted token is then argmax r (docs/algorithm.md §2).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingParams:
    """How a member's logits become its sampling distribution p_i (and how r is processed)."""

    temperature: float = 1.0
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1.0 = off

    def __post_init__(self) -> None:
        if not self.temperature >= 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 = off), got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1] (1 = off), got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def process_logits(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Apply temperature, then top-k, then top-p to logits [..., V]; removed tokens get -inf."""
    logits = logits.float()
    if not params.greedy and params.temperature != 1.0:
        logits = logits / params.temperature
    if params.top_k and params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        cum = sorted_logits.softmax(-1).cumsum(-1)
        # drop a token when the mass strictly before it already reaches top_p (keeps >= 1 token)
        drop_sorted = (cum - sorted_logits.softmax(-1)) >= params.top_p
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def to_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """A member's sampling distribution p_i = softmax(process(l_i)), float32 [..., V]."""
    return process_logits(logits, params).softmax(-1)


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One draw per row of probs [..., V] -> token ids [...]. Uses only `generator`."""
    flat = probs.reshape(-1, probs.shape[-1])
    tokens = torch.multinomial(flat, 1, generator=generator).squeeze(-1)
    return tokens.reshape(probs.shape[:-1])


def pick(probs: torch.Tensor, greedy: bool, generator: torch.Generator | None) -> torch.Tensor:
    """argmax under greedy decoding, else a draw from probs [..., V]."""
    return probs.argmax(-1) if greedy else sample(probs, generator)
