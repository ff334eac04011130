"""Refuse bad CoS request parameters at vLLM's request admission, before they reach the engine.

Why: served requests carry the CoS parameters in `vllm_xargs` (SamplingParams.extra_args), which vLLM
passes through unchecked; they are read inside `compute_logits` in the EngineCore, where an exception
stops the engine for every later request (500s, /health 503). vLLM's own hook for per-request checks
of extra_args is a custom logits processor's `validate_params`, but vLLM refuses custom logits
processors when speculative decoding is on, which is this backend's point. So the plugin wraps
`InputProcessor._validate_params` (vLLM 0.32/0.33, front-end process; also the offline `LLM`; wrapped
when vLLM imports it, see `install`): it runs
`request_params.validate_extra_args` first and raises vLLM's `VLLMValidationError(parameter=...)`,
which the OpenAI server answers with 400 naming the parameter. If that method is missing (another
vLLM version), a warning says so and the engine-side fallback (from_extra_args) keeps the server up.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.util
import logging
import sys

from .request_params import InvalidCosParameter, validate_extra_args

logger = logging.getLogger(__name__)


TARGET = "vllm.v1.engine.input_processor"


def install() -> bool:
    """Wrap InputProcessor._validate_params, now if vLLM imported it already, else right after vLLM
    imports it (the plugin loads in every vLLM process; most never admit requests, and importing the
    front end's modules from there would cost time and risk import cycles). True if wrapped now."""
    module = sys.modules.get(TARGET)
    if module is not None:
        return _wrap(module)
    if not any(isinstance(finder, _WrapOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _WrapOnImport())
    return False


class _WrapOnImport(importlib.abc.MetaPathFinder):
    """Finds TARGET like the rest of sys.meta_path would, and wraps it once its code has run."""

    def find_spec(self, name, path, target=None):
        if name != TARGET:
            return None
        sys.meta_path.remove(self)  # once: the real finders answer from here on
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
            run = spec.loader.exec_module

            def exec_module(module):
                run(module)
                _wrap(module)

            spec.loader.exec_module = exec_module
        return spec


def _wrap(module) -> bool:
    input_processor = getattr(module, "InputProcessor", None)
    original = getattr(input_processor, "_validate_params", None)
    if original is None:
        logger.warning("cos: InputProcessor._validate_params not found in this vLLM; CoS request parameters "
                       "are not validated at admission (bad values fall back to T=1 in the engine)")
        return False
    if getattr(original, "_cos_validates", False):
        return False

    @functools.wraps(original)
    def _validate_params(self, params, *args, **kwargs):
        extra = getattr(params, "extra_args", None)
        if extra:
            try:
                validate_extra_args(extra)
            except InvalidCosParameter as e:
                raise _client_error(e) from None
        return original(self, params, *args, **kwargs)

    _validate_params._cos_validates = True
    input_processor._validate_params = _validate_params
    return True


def _client_error(e: InvalidCosParameter) -> Exception:
    """vLLM's validation error (400 with `param`) where it exists, else the ValueError (also a 400)."""
    try:
        from vllm.exceptions import VLLMValidationError
    except ImportError:
        return e
    return VLLMValidationError(str(e), parameter=e.parameter, value=e.value)
