"""lm-eval `model_args` -> the runner's checked RunConfig and member paths, with nothing loaded.

    lm_eval --model cos --model_args members=EXPERT|AMATEUR,method=cd_chef,alpha=0.1,gamma=1|5

lm-eval splits model_args at ',' and '=' and turns 'true', '5', '0.1' into Python values, so a list is
written with '|': members=a|b, gamma=1|5, weights=0.3|0.7, dtype=bfloat16|float32. Each key is the
runner's config key (configs/default.yaml) and is checked by the runner's own code (runner/config.py,
runner/build.py): what main_dataset.py refuses is refused here, before any model loads, with the key
named as it is written in model_args.
"""

from __future__ import annotations

import difflib
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from ..plan import REGISTRY
from ..runner.build import check_before_loading
from ..runner.config import RunConfig, run_config

log = logging.getLogger("cos.lm_eval")

SEPARATOR = "|"
# model_args key -> its place in the run config (configs/default.yaml)
METHOD_KEYS = {"alpha": "alpha", "plausibility": "plausibility", "lambda": "lambda", "lam": "lambda",
               "weights": "weights", "combination": "combination", "gamma": "gamma", "proposer": "proposer",
               "bonus": "bonus", "draft_threshold": "draft_threshold", "schedule": "schedule", "tree": "tree",
               "byte_level": "byte_level", "prune": "prune", "draft_bytes": "draft_bytes"}
SAMPLING_KEYS = ("temperature", "top_p", "top_k")  # method.generate.*: defaults for requests that set none
RUN_KEYS = ("seed", "device", "dtype", "threads", "compile", "kernels", "compare_with", "warmup")
CUSTOM_KEYS = ("target", "space")  # a custom combination: method.combination = {target, space}
OWN_KEYS = ("members", "method", "max_gen_toks", "max_length", "batch_size", "max_batch_size")
KEYS = (*OWN_KEYS, *METHOD_KEYS, *SAMPLING_KEYS, *RUN_KEYS, *CUSTOM_KEYS)
INT_LISTS, FLOAT_LISTS, TEXT_LISTS = ("gamma",), ("weights",), ("dtype", "device")
DEFAULT_MAX_GEN_TOKS = 256  # lm-eval's HF model uses the same when a task sets no max_gen_toks


@dataclass
class ModelArgs:
    run: RunConfig  # checked: plan, sampling defaults, devices, dtypes, threads, seed, compare_with
    paths: list[str]  # resolved member folders (or hub ids), config order
    sampling: dict  # temperature / top_p / top_k as given in model_args (request gen_kwargs override them)
    max_gen_toks: int  # new tokens when a request's gen_kwargs set none
    max_length: int | None  # context window for scoring and prompts; None: the members' own
    batch_size: object  # lm-eval's; requests run one at a time, in order, whatever it says


def fail(message: str) -> ValueError:
    return ValueError(f"lm_eval --model cos: {message}")


def split_list(key: str, value, cast=str) -> list:
    """'a|b' (or a list from the Python API) -> [a, b], each entry cast and non-empty."""
    entries = list(value) if isinstance(value, (list, tuple)) else str(value).split(SEPARATOR)
    try:
        out = [cast(e.strip()) if isinstance(e, str) else cast(e) for e in entries]
    except ValueError:
        raise fail(f"{key}={value}: each entry of a list must be a {cast.__name__}, entries separated by "
                   f"'{SEPARATOR}' (lm-eval's model_args already use ',')") from None
    if any(e == "" for e in out):
        raise fail(f"{key}={value}: an empty entry; separate entries with '{SEPARATOR}', e.g. {key}=a{SEPARATOR}b")
    return out


def one_or_list(key: str, value, cast):
    """A value that may be one or one per member."""
    is_list = isinstance(value, (list, tuple)) or (isinstance(value, str) and SEPARATOR in value)
    return split_list(key, value, cast) if is_list else value


def check_names(args: Mapping) -> None:
    unknown = [k for k in args if k not in KEYS]
    if unknown:
        key = unknown[0]
        close = difflib.get_close_matches(key, KEYS, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise fail(f"unknown model_args key {key!r}{hint}; the keys are {', '.join(KEYS)}")
    if "members" not in args:
        raise fail(f"model_args needs members=<model>{SEPARATOR}<model>...: model folders, packaged names "
                   f"(python -m cos.models list) or hub ids, in config order")
    if args.get("method") not in REGISTRY:
        raise fail(f"model_args method={args.get('method')!r} is not a method: use one of {', '.join(REGISTRY)}")
    if "lam" in args and "lambda" in args:
        raise fail("lam and lambda are the same setting: give one")
    if "combination" in args and any(k in args for k in CUSTOM_KEYS):
        raise fail("give combination=<preset> or target=module:function (with space=...), not both")


def member_section(method: str, members: list[str]) -> dict:
    """members (config order) -> the method section's member keys (model, extra_model, amateur_model...)."""
    keys, n_fixed = REGISTRY[method].family.member_keys, REGISTRY[method].family.n_members
    if (n_fixed and len(members) != n_fixed) or len(members) < 2 and n_fixed != 1:
        wanted = f"{n_fixed}" if n_fixed else "2 or more"
        raise fail(f"method {method} takes {wanted} members [{', '.join(keys)}], got {len(members)}: "
                   f"members={SEPARATOR.join(keys)}")
    section = {"name": method, keys[0]: members[0]}
    if len(keys) > 1:
        section[keys[1]] = members[1] if len(members) == 2 else members[1:]
    return section


def run_dict(args: Mapping, members: list[str]) -> dict:
    """model_args -> a composed run config (the dict main_dataset.py builds from YAML)."""
    method = member_section(args["method"], members)
    for key, target in METHOD_KEYS.items():
        if key in args:
            value = args[key]
            if key in INT_LISTS:
                value = one_or_list(key, value, int)
            elif key in FLOAT_LISTS:
                value = split_list(key, value, float)
            method[target] = value
    if any(k in args for k in CUSTOM_KEYS):
        method["combination"] = {k: args[k] for k in CUSTOM_KEYS if k in args}
    method["generate"] = {k: args[k] for k in SAMPLING_KEYS if k in args}
    cfg = {"method": method, "dtype": "bfloat16", "compare_with": None}
    for key in RUN_KEYS:
        if key in args:
            cfg[key] = one_or_list(key, args[key], str) if key in TEXT_LISTS else args[key]
    return cfg


def as_model_args_message(message: str) -> str:
    """The runner names keys as in the YAML (method.gamma, method.generate.top_p); model_args has them flat."""
    return re.sub(r"\bmethod\.(generate\.)?", "", message)


def positive_int(key: str, value, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise fail(f"{key} must be an int >= {minimum}, got {value!r}")
    return value


def parse_model_args(args: Mapping) -> ModelArgs:
    """Check every model_args key and value, and resolve the members; load nothing. ValueError /
    FileNotFoundError naming the key and the fix."""
    args = {k: v for k, v in args.items() if v is not None}  # lm-eval passes device=None when unset
    check_names(args)
    if isinstance(args.get("device"), str) and args["device"].startswith("cuda") and not torch.cuda.is_available():
        # lm-eval's CLI passes --device cuda:0 unless told otherwise; its HF model then falls back the same way
        log.warning("device=%s: CUDA is not available here, members load on the CPU (device=auto)", args["device"])
        args["device"] = "auto"
    max_gen_toks = positive_int("max_gen_toks", args.get("max_gen_toks", DEFAULT_MAX_GEN_TOKS))
    max_length = None if args.get("max_length") is None else positive_int("max_length", args["max_length"], 2)
    members = split_list("members", args["members"])
    cfg = run_dict(args, members)
    try:
        run = run_config(cfg)
    except ValueError as e:
        raise fail(as_model_args_message(str(e))) from None
    run.method.roles = [f"members[{i}]" for i in range(len(members))]  # how a missing model is named
    try:
        paths = check_before_loading(run)
    except FileNotFoundError as e:
        raise FileNotFoundError(f"lm_eval --model cos: {e}") from None
    except ValueError as e:
        raise fail(as_model_args_message(str(e))) from None
    return ModelArgs(run=run, paths=paths, sampling={k: args[k] for k in SAMPLING_KEYS if k in args},
                     max_gen_toks=max_gen_toks, max_length=max_length, batch_size=args.get("batch_size", 1))
