"""Loading members: models from a local folder or a hub id, devices, dtypes, the one-vocabulary check."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase

from .member import Member

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
          "float16": torch.float16, "fp16": torch.float16}


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
                compile: bool = False) -> Member:
    """A member from a local folder or a hub id (hub ids need network; set HF_HUB_OFFLINE=1 offline).
    compile: a static cache and torch.compile'd decode forwards (CUDA graphs on CUDA), see Member."""
    model = AutoModelForCausalLM.from_pretrained(path, dtype=resolve_dtype(dtype))
    runtime = dict(cache="static", compile=True) if compile else {}
    return Member(model.to(resolve_device(device)), name=str(path), **runtime)


def load_tokenizer(path: str) -> PreTrainedTokenizerBase:
    return AutoTokenizer.from_pretrained(path)


def check_vocabularies(members: Sequence[Member], tokenizers: Sequence[PreTrainedTokenizerBase | None] = ()) -> None:
    """All members must share one vocabulary: same logits size and, when given, the same tokenizer."""
    sizes = {m.name: m.vocab_size for m in members}
    if len(set(sizes.values())) > 1:
        raise ValueError(
            f"members have different vocabulary sizes {sizes}: collaborative decoding needs one shared "
            f"vocabulary (same tokenizer); pick members of one model family"
        )
    known = [(m.name, t) for m, t in zip(members, tokenizers) if t is not None]
    if known:
        first_name, first = known[0]
        first_vocab = first.get_vocab()
        for name, tok in known[1:]:
            if tok.get_vocab() != first_vocab:
                raise ValueError(
                    f"tokenizers of {first_name} and {name} differ: collaborative decoding needs one "
                    f"shared tokenizer; pick members of one model family"
                )
