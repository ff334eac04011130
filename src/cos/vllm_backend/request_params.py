"""Per-row CoS sampling parameters for the rows of `compute_logits` (vLLM internals, read only).

Why: in `probs` space (WE, mean) r depends on the temperature / top-k / top-p applied to EACH member
(docs/algorithm.md §2), so the composite must know them when it computes r. vLLM calls
`model.compute_logits(hidden_states)` with no request information, so we read it from the model runner
that called us: its `input_batch` lists the running requests in row order, and each request's
`SamplingParams.extra_args` carries the CoS parameters (keys below). Rows per request = 1 + the
number of draft tokens scheduled for it (speculative decoding), else 1.

The runner is found once by walking up the Python stack from compute_logits (the runner calls it
directly: patches.calling_runner) and is cached. Anything unexpected (a profiling run, a prompt-logprobs call, an unknown
runner) falls back to one shared parameter set if all requests agree, else to the defaults.

Requests are validated before they reach the engine (`validate_extra_args`, installed into vLLM's
request admission by request_validation.py): a bad value is the client's 400, naming the parameter.
Should one slip through anyway (another front end), the engine logs it and uses the defaults for that
request instead of raising inside compute_logits, which would take the whole EngineCore down.
"""

from __future__ import annotations

import logging
import math
import weakref
from collections.abc import Iterator, Mapping

import torch

from ..sampling import SamplingParams
from .patches import calling_runner

logger = logging.getLogger(__name__)
KEYS = ("cos_temperature", "cos_top_k", "cos_top_p")
DEFAULT = SamplingParams(temperature=1.0)  # r at T=1, no truncation: vLLM's own T / top-k / top-p then act on r


def extra_args(params: SamplingParams) -> dict:
    """What VllmEngine puts into vLLM's SamplingParams.extra_args (also valid as OpenAI `vllm_xargs`)."""
    return {"cos_temperature": params.temperature, "cos_top_k": params.top_k, "cos_top_p": params.top_p}


class InvalidCosParameter(ValueError):
    """A request's CoS parameter is missing its type or range; `parameter` names it (vllm_xargs.<key>)."""

    def __init__(self, key: str, value: object, rule: str) -> None:
        super().__init__(f"vllm_xargs.{key} must be {rule}, got {value!r}")
        self.parameter = f"vllm_xargs.{key}"
        self.value = value


def _number(key: str, value: object, rule: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidCosParameter(key, value, rule)
    return float(value)


def validate_extra_args(extra: Mapping | None) -> SamplingParams:
    """The CoS parameters of one request, checked (pure Python: no vLLM needed). Raises
    InvalidCosParameter for a wrong type or range, or an unknown `cos_*` key (a typo would otherwise
    be ignored); other keys belong to other plugins and are left alone."""
    if extra is None:
        return DEFAULT
    if not isinstance(extra, Mapping):
        raise InvalidCosParameter("*", extra, "a mapping of parameters")
    unknown = sorted(k for k in extra if isinstance(k, str) and k.startswith("cos_") and k not in KEYS)
    if unknown:
        raise InvalidCosParameter(unknown[0], extra[unknown[0]], f"one of the CoS parameters {', '.join(KEYS)}")
    if not any(k in extra for k in KEYS):
        return DEFAULT
    temperature = _number("cos_temperature", extra.get("cos_temperature", 1.0), "a number >= 0 (0 = greedy)")
    if temperature < 0:
        raise InvalidCosParameter("cos_temperature", extra["cos_temperature"], "a number >= 0 (0 = greedy)")
    top_k = extra.get("cos_top_k", 0)
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
        raise InvalidCosParameter("cos_top_k", top_k, "an integer >= 0 (0 = off)")
    top_p = _number("cos_top_p", extra.get("cos_top_p", 1.0), "a number in (0, 1] (1 = off)")
    if not 0.0 < top_p <= 1.0:
        raise InvalidCosParameter("cos_top_p", extra["cos_top_p"], "a number in (0, 1] (1 = off)")
    return SamplingParams(temperature, top_k, top_p)


def from_extra_args(extra: Mapping | None) -> SamplingParams:
    """In the engine: never raise (it would stop the EngineCore for every request); log and use DEFAULT."""
    try:
        return validate_extra_args(extra)
    except InvalidCosParameter as e:
        if not _warned:
            _warned.append(True)
            logger.warning("cos: %s (not validated at admission?); using T=1 without truncation for such "
                           "requests (logged once)", e)
        return DEFAULT


_warned: list[bool] = []


def grouped(params: list[SamplingParams], device=None) -> Iterator[tuple[SamplingParams, torch.Tensor]]:
    """Each distinct parameter set with the indices of its rows: one batched call per set (usually one)."""
    for p in set(params):
        yield p, torch.tensor([i for i, q in enumerate(params) if q == p], device=device)


class RowParams:
    """Finds the calling model runner and maps logits rows to their requests' CoS parameters."""

    def __init__(self) -> None:
        self._runner: weakref.ref | None = None
        self.fallbacks = 0  # calls that could not be mapped row by row (diagnostics)

    def runner(self):
        """The model runner calling the composite (cached; None outside one, e.g. a profiling run)."""
        return self._find_runner()

    def _find_runner(self):
        if self._runner is not None and self._runner() is not None:
            return self._runner()
        runner = calling_runner(2)  # from the frame that called __call__ or runner() (compute_logits, forward)
        if runner is not None:
            self._runner = weakref.ref(runner)
        return runner

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
