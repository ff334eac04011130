"""A generate_until request's gen_kwargs -> the engine's generation options.

lm-eval's meaning, as its Hugging Face model reads them: `until` (stop strings: the text is cut before the
first), `max_gen_toks`, `do_sample` (False: greedy), `temperature` (0: greedy), `top_p`, `top_k`. A
setting a request leaves out comes from model_args, then from lm-eval's defaults (greedy, 256 tokens).
Any other key is refused: the engine samples r exactly and has nothing that would honour it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

log = logging.getLogger("cos.lm_eval")

KNOWN = ("until", "max_gen_toks", "do_sample", "temperature", "top_p", "top_k")


def request_options(gen_kwargs: Mapping, defaults: Mapping, max_gen_toks: int, seed: int) -> dict:
    """Engine.generate options for one request. defaults: temperature / top_p / top_k from model_args."""
    unknown = sorted(set(gen_kwargs) - set(KNOWN))
    if unknown:
        raise ValueError(f"lm_eval --model cos: gen_kwargs {', '.join(unknown)} cannot be honoured (the engine "
                         f"samples the combined distribution r exactly; it takes {', '.join(KNOWN)}): remove "
                         f"them from the task's generation_kwargs or --gen_kwargs")
    until = gen_kwargs.get("until") or []
    until = [until] if isinstance(until, str) else list(until)
    for key in ("temperature", "top_p", "top_k"):
        if key in gen_kwargs and key in defaults and gen_kwargs[key] != defaults[key]:
            warn_once(f"the task's gen_kwargs set {key}={gen_kwargs[key]}, which wins over model_args "
                      f"{key}={defaults[key]} (set it with --gen_kwargs to change it for every task)")
    temperature = gen_kwargs.get("temperature", defaults.get("temperature"))
    do_sample = gen_kwargs.get("do_sample")
    if do_sample is False or (temperature is None and not do_sample):
        temperature = 0.0  # greedy: argmax r
    elif temperature is None:
        temperature = 1.0
    return {"max_new_tokens": int(gen_kwargs.get("max_gen_toks", max_gen_toks)), "temperature": float(temperature),
            "top_p": float(gen_kwargs.get("top_p", defaults.get("top_p", 1.0))),
            "top_k": int(gen_kwargs.get("top_k", defaults.get("top_k", 0))), "seed": seed, "stop": until}


_warned: set[str] = set()


def warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        log.warning(message)
