"""Byte-level members from model folders or hub ids, and when an engine switches to bytes."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ..loading import load_member
from ..tokens import as_id_list
from .member import ByteMember
from .vocabulary import TokenBytes

log = logging.getLogger(__name__)

BYTE_LEVEL = ("auto", True, False)
BYTE_OPTIONS = ("prune", "draft_bytes")  # settings that apply over bytes only (ByteEngine.from_pretrained)


def byte_level_reason(byte_level, names: Sequence[str], tokenizers: Sequence) -> str | None:
    """Why members are combined over bytes, or None for tokens. byte_level: auto (bytes exactly when the
    tokenizers differ), true (bytes), false (tokens; different tokenizers are then an error, later)."""
    if byte_level not in BYTE_LEVEL:
        raise ValueError(f"byte_level must be auto, true or false, got {byte_level!r}")
    if byte_level is False:
        return None
    first = tokenizers[0].get_vocab()
    differ = [name for name, tok in zip(names[1:], tokenizers[1:]) if tok.get_vocab() != first]
    if differ:
        return f"the tokenizers of {names[0]} and {', '.join(differ)} differ"
    return "byte_level=true" if byte_level is True else None


def end_ids(tokenizer, model) -> list[int]:
    """The tokens that end a text: the tokenizer's EOS and the model's generation_config EOS ids."""
    ids = {tokenizer.eos_token_id, *as_id_list(getattr(model.generation_config, "eos_token_id", None))}
    return sorted(i for i in ids if i is not None)


def load_byte_member(path: str, tokenizer, device="auto", dtype="bfloat16", kernels: bool | str = "auto",
                     prune: float = 0.0) -> ByteMember:
    member = load_member(path, device, dtype, False, kernels)
    vocab = TokenBytes.from_tokenizer(tokenizer, member.vocab_size, end_ids(tokenizer, member.model))
    return ByteMember(member, vocab, prune=prune, name=str(path))
