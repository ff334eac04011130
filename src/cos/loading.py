"""Loading members: models from a local folder or a hub id, devices, dtypes, the one-vocabulary check."""

from __future__ import annotations

import logging

import os
import re
from collections.abc import Sequence

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase

from .member import Member

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
          "float16": torch.float16, "fp16": torch.float16}


HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+$")
ONE_FAMILY = "pick members of one model family, or combine them over bytes (byte_level: auto or true; docs/byte_level.md)"


def check_model_path(path: str) -> str:
    """A local model folder (with config.json) or a hub id 'org/name'; anything else is a clear error
    (transformers would answer a missing folder with "Repo id must be in the form ...")."""
    expanded = os.path.expanduser(str(path))
    if os.path.isdir(expanded):
        if not os.path.isfile(os.path.join(expanded, "config.json")):
            raise FileNotFoundError(f"{path} has no config.json, so it is not a model folder")
        return expanded
    local = os.path.isabs(expanded) or str(path).startswith(("./", "../", "~")) or not HUB_ID.match(str(path))
    if local:
        raise FileNotFoundError(f"model folder {path} does not exist: give a folder holding config.json, or a "
                                f"hub id 'org/name'")
    return str(path)


def check_device(device: str | torch.device) -> None:
    """Fail before loading when a device cannot be used."""
    if str(device) == "auto":
        return
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"unknown device {device!r}: use auto, cpu, cuda or cuda:N ({e})") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {device} asked for, but CUDA is not available here: use device=cpu or auto")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"device {device}: only {torch.cuda.device_count()} CUDA device(s) here")


def check_before_weights(paths: Sequence[str],
                         tokenizers: Sequence[PreTrainedTokenizerBase | None] = ()) -> int | None:
    """The one-vocabulary check from config.json and the tokenizer files, before any weights load.
    Returns the shared vocabulary size V (None when a config does not say)."""
    sizes = {}
    for path in paths:
        config = AutoConfig.from_pretrained(path)
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        sizes[str(path)] = getattr(text, "vocab_size", None)
    if None not in sizes.values() and len(set(sizes.values())) > 1:
        raise ValueError(
            f"members have different vocabulary sizes in config.json {sizes}: collaborative decoding needs "
            f"one shared vocabulary (same tokenizer); {ONE_FAMILY}"
        )
    _check_tokenizers([(str(p), t) for p, t in zip(paths, tokenizers) if t is not None])
    return None if None in sizes.values() else next(iter(sizes.values()), None)


def per_member_placement(device, dtype, n: int) -> tuple[list, list]:
    """device / dtype: one value or one per member -> one per member, each checked before any weights load."""
    devices = list(device) if isinstance(device, (list, tuple)) else [device] * n
    dtypes = list(dtype) if isinstance(dtype, (list, tuple)) else [dtype] * n
    for dv, dt in zip(devices, dtypes):
        check_device(dv)
        resolve_dtype(dt)
    if len(devices) != n or len(dtypes) != n:
        raise ValueError(f"device and dtype take one value or one per member ({n}), "
                         f"got {len(devices)} and {len(dtypes)}")
    return devices, dtypes


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """'auto' -> cuda if available, else cpu."""
    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}: use one of {', '.join(DTYPES)}")
    return DTYPES[dtype]


def load_member(path: str, device: str | torch.device = "auto", dtype: str | torch.dtype = "float32",
                compile: bool = False, kernels: bool | str = "auto") -> Member:
    """A member from a local folder or a hub id (hub ids need network; set HF_HUB_OFFLINE=1 offline).
    compile: a static cache and torch.compile'd decode forwards (CUDA graphs on CUDA), see Member.
    kernels: the CPU row-invariant kernels (cos.kernels): auto/True = wherever they run, False = torch's ops."""
    model = AutoModelForCausalLM.from_pretrained(path, dtype=resolve_dtype(dtype)).to(resolve_device(device))
    use_kernels(model, kernels, str(path))
    runtime = dict(cache="static", compile=True) if compile else {}
    return Member(model, name=str(path), **runtime)


def use_kernels(model, kernels: bool | str, name: str) -> int:
    """Install the CPU row-invariant kernels (cos.kernels: Linear layers and attention) on `model` unless
    `kernels` is False; how many Linear layers use them. auto and True are the same since the kernels
    became what makes a verify block's rows bitwise a one-token step's (kernels/invariance.py)."""
    from .kernels import install_row_kernels

    if kernels not in (True, False, "auto"):
        raise ValueError(f"kernels must be auto, true or false, got {kernels!r}")
    if kernels is False:
        return 0
    changed = install_row_kernels(model)
    log.info("%s: row-invariant CPU kernels on %d Linear layers", name, changed)
    return changed


def load_tokenizer(path: str) -> PreTrainedTokenizerBase:
    return AutoTokenizer.from_pretrained(path)


def check_vocabularies(members: Sequence[Member], tokenizers: Sequence[PreTrainedTokenizerBase | None] = ()) -> None:
    """All members must share one vocabulary: same logits size and, when given, the same tokenizer."""
    sizes = {m.name: m.vocab_size for m in members}
    if len(set(sizes.values())) > 1:
        raise ValueError(
            f"members have different vocabulary sizes {sizes}: collaborative decoding needs one shared "
            f"vocabulary (same tokenizer); {ONE_FAMILY}"
        )
    _check_tokenizers([(m.name, t) for m, t in zip(members, tokenizers) if t is not None])


def _check_tokenizers(named: Sequence[tuple[str, PreTrainedTokenizerBase]]) -> None:
    if not named:
        return
    first_name, first = named[0]
    first_vocab = first.get_vocab()
    for name, tok in named[1:]:
        if tok.get_vocab() != first_vocab:
            raise ValueError(
                f"tokenizers of {first_name} and {name} differ: collaborative decoding needs one "
                f"shared tokenizer; {ONE_FAMILY}"
            )
