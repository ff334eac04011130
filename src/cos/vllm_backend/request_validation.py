"""Refuse bad CoS request parameters at vLLM's request admission, before they reach the engine.

Why: served requests carry the CoS parameters in `vllm_xargs` (SamplingParams.extra_args), which vLLM
passes through unchecked; they are read inside `compute_logits` in the EngineCore, where an exception
stops the engine for every later request (500s, /health 503). vLLM's own hook for per-request checks
of extra_args is a custom logits processor's `validate_params`, but vLLM refuses custom logits
processors when speculative decoding is on, which is this backend's point. So the plugin wraps
`InputProcessor._validate_params` (front-end process; also the offline `LLM`; wrapped when vLLM imports
it: patches.validate_at_admission) to call `check_request` first: it runs
`request_params.validate_extra_args` and raises vLLM's `VLLMValidationError(parameter=...)`, which the
OpenAI server answers with 400 naming the parameter.
"""

from __future__ import annotations

from .request_params import InvalidCosParameter, validate_extra_args


def check_request(params) -> None:
    """Raise the client's error for a request whose extra_args hold a bad CoS parameter."""
    extra = getattr(params, "extra_args", None)
    if extra:
        try:
            validate_extra_args(extra)
        except InvalidCosParameter as e:
            raise _client_error(e) from None


def _client_error(e: InvalidCosParameter) -> Exception:
    """vLLM's validation error (400 with `param`) where it exists, else the ValueError (also a 400)."""
    try:
        from vllm.exceptions import VLLMValidationError
    except ImportError:
        return e
    return VLLMValidationError(str(e), parameter=e.parameter, value=e.value)
