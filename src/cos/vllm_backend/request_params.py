"""Per-row CoS sampling parameters for the rows of `compute_logits` (vLLM internals, read only).

Why: in `probs` space (WE, mean) r depends on the temperature / top-k / top-p applied to EACH member
(ALGORITHM.md §2), so the composite must know them when it computes r. vLLM calls
`model.compute_logits(hidden_states)` with no request information, so we read it from the model runner
that called us: its `input_batch` lists the running requests in row order, and each request's
`SamplingParams.extra_args` carries the CoS parameters (keys below). Rows per request = 1 + the
number of draft tokens scheduled for it (speculative decoding), else 1.

The runner is found once by walking up the Python stack from compute_logits (the runner calls it
directly) and is cached. Anything unexpected (a profiling run, a prompt-logprobs call, an unknown
runner) falls back to one shared parameter set if all requests agree, else to the defaults.
"""

from __future__ import annotations

import logging
import sys
import weakref
from collections.abc import Mapping

from ..sampling import SamplingParams

logger = logging.getLogger(__name__)
KEYS = ("cos_temperature", "cos_top_k", "cos_top_p")
DEFAULT = SamplingParams(temperature=1.0)  # r at T=1, no truncation: vLLM's own T / top-k / top-p then act on r


def extra_args(params: SamplingParams) -> dict:
    """What VllmEngine puts into vLLM's SamplingParams.extra_args (also valid as OpenAI `vllm_xargs`)."""
    return {"cos_temperature": params.temperature, "cos_top_k": params.top_k, "cos_top_p": params.top_p}


def from_extra_args(extra: Mapping | None) -> SamplingParams:
    if not extra or not any(k in extra for k in KEYS):
        return DEFAULT
    return SamplingParams(float(extra.get("cos_temperature", 1.0)), int(extra.get("cos_top_k", 0)),
                          float(extra.get("cos_top_p", 1.0)))


class RowParams:
    """Finds the calling model runner and maps logits rows to their requests' CoS parameters."""

    def __init__(self) -> None:
        self._runner: weakref.ref | None = None
        self.fallbacks = 0  # calls that could not be mapped row by row (diagnostics)

    def _find_runner(self):
        if self._runner is not None and self._runner() is not None:
            return self._runner()
        frame = sys._getframe(2)
        for _ in range(12):
            if frame is None:
                return None
            obj = frame.f_locals.get("self")
            if obj is not None and hasattr(obj, "input_batch") and hasattr(obj, "requests"):
                self._runner = weakref.ref(obj)
                return obj
            frame = frame.f_back
        return None

    def __call__(self, n_rows: int) -> list[SamplingParams]:
        """One SamplingParams per logits row."""
        runner = self._find_runner()
        if runner is None:
            return [DEFAULT] * n_rows
        batch = runner.input_batch
        n = batch.num_reqs
        per_request = []
        for req_id in batch.req_ids[:n]:
            state = runner.requests.get(req_id)
            sp = getattr(state, "sampling_params", None)
            per_request.append(from_extra_args(getattr(sp, "extra_args", None)))
        drafts = getattr(batch, "spec_token_ids", None) or [()] * n
        counts = [1 + len(drafts[i]) for i in range(n)]
        if sum(counts) == n_rows:
            return [p for p, c in zip(per_request, counts) for _ in range(c)]
        self.fallbacks += 1
        if n_rows == n:
            return per_request
        shared = set(per_request)
        if len(shared) == 1:
            return [shared.pop()] * n_rows
        if n > 0 and self.fallbacks == 1:
            logger.warning("cos: %d logits rows for %d requests with different CoS parameters (e.g. prompt "
                           "logprobs in a mixed batch): using T=1 without truncation for this call", n_rows, n)
        return [DEFAULT] * n_rows
