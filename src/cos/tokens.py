"""Prompt ids and EOS ids, as both engines (cos.Engine and vllm_backend.VllmEngine) take them.

- `encode_prompt`: a text (tokenized with special tokens, as transformers' generate sees it) or token
  ids -> checked ids: at least one token, every id inside the vocabulary.
- `eos_ids`: where decoding stops by default: every member's generation_config EOS and the tokenizer's.
  A model folder's EOS is read by `generation_eos` (generation_config.json, else config.json, as
  transformers reads it); a loaded model's by `as_id_list(model.generation_config.eos_token_id)`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence


def encode_prompt(prompt: str | Sequence[int], tokenizer, vocab_size: int) -> list[int]:
    """The prompt's token ids, or a ValueError saying what is wrong with it."""
    if isinstance(prompt, str):
        if tokenizer is None:
            raise ValueError("a text prompt needs a tokenizer: load members with one or pass token ids")
        ids = tokenizer(prompt, add_special_tokens=True)["input_ids"]
    else:
        ids = [int(t) for t in prompt]
    if not ids:
        raise ValueError("empty prompt: give at least one token of context")
    if any(not 0 <= t < vocab_size for t in ids):
        raise ValueError(f"prompt token ids must lie in [0, {vocab_size})")
    return ids


def as_id_list(eos) -> list[int]:
    """An `eos_token_id` field (None, one id, or a list of ids) as a list."""
    return list(eos) if isinstance(eos, (list, tuple)) else [] if eos is None else [eos]


def generation_eos(path: str | os.PathLike, config=None) -> list[int]:
    """A model folder's EOS ids as transformers reads them: generation_config.json, else config.json."""
    from transformers import AutoConfig, GenerationConfig

    try:
        eos = GenerationConfig.from_pretrained(str(path)).eos_token_id
    except OSError:
        eos = GenerationConfig.from_model_config(config or AutoConfig.from_pretrained(str(path))).eos_token_id
    return as_id_list(eos)


def eos_ids(member_eos: Iterable[Iterable[int]], tokenizer=None) -> set[int]:
    """The default stop ids: the union of the members' EOS ids and the tokenizer's EOS (where it has one)."""
    ids = {int(t) for eos in member_eos for t in eos}
    if tokenizer is not None and tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return ids


def encode_text(tokenizer, text: str, chat_template: bool, max_prompt_len: int) -> list[int]:
    """Prompt text -> ids (chat template on request; only the last max_prompt_len tokens when > 0)."""
    if chat_template:
        text = tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                             add_generation_prompt=True)
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]  # the template holds the special tokens
    else:
        ids = tokenizer(text, add_special_tokens=True)["input_ids"]
    return ids[-max_prompt_len:] if max_prompt_len > 0 else ids
