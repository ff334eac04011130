"""A verified GGUF -> a dense Hugging Face folder, written atomically.

transformers de-quantizes a GGUF on every load (25-60 s here) but refuses to `save_pretrained` a
GGUF-loaded model, so we rebuild a plain model from its config (without `quantization_config`),
load the state dict into it and save that; reloading the dense copy takes ~3 s. The folder is
written inside the pull workspace and renamed into place only when complete.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cos.models.cache import write_marker

if TYPE_CHECKING:  # torch/transformers are imported only when converting: `list` stays fast
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

DTYPES = ("bfloat16", "float32")


def load_dense(
    gguf_path: Path, dtype: str, progress: Callable[[str], None] = print
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a GGUF and return `(model, tokenizer)` with a plain (savable) model in `dtype`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert dtype in DTYPES, dtype
    progress(f"loading and de-quantizing {gguf_path.name} (tens of seconds)")
    kwargs = {"gguf_file": gguf_path.name}
    gguf_model = AutoModelForCausalLM.from_pretrained(
        gguf_path.parent, dtype=torch.float32, **kwargs
    )
    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, **kwargs)
    config = copy.deepcopy(gguf_model.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # otherwise the rebuilt model is flagged as GGUF-quantized
    # the GGUF's free-text "general.name" is not a loadable path; keep it out of config.json
    config.__dict__.pop("_model_name_or_path", None)
    progress(f"rebuilding a dense {type(gguf_model).__name__} in {dtype}")
    model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    model.load_state_dict(gguf_model.state_dict(), strict=True)  # casts to `dtype` on copy
    model.generation_config = copy.deepcopy(gguf_model.generation_config)
    del gguf_model
    return model.eval(), tokenizer


def stop_token_ids(
    generation_eos: int | list[int] | None, tokenizer: PreTrainedTokenizerBase, extra: Iterable[str]
) -> list[int]:
    """All ids that end generation: the config's, the tokenizer's eos, and `extra` tokens.

    Qwen's GGUF stops only at <|im_end|> (151645), fine for chat; plain-text completion ends
    with <|endoftext|> (151643), so without it greedy completion runs on to the token limit.
    """
    ids: list[int] = []
    if isinstance(generation_eos, int):
        generation_eos = [generation_eos]
    candidates = [*(generation_eos or []), tokenizer.eos_token_id]
    vocab = tokenizer.get_vocab()
    candidates += [vocab.get(token) for token in extra]
    for i in candidates:
        if i is not None and i not in ids:
            ids.append(int(i))
    return ids


def save_atomic(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    final_dir: Path,
    workspace: Path,
    extra_eos_tokens: Iterable[str],
    info: dict[str, Any],
    progress: Callable[[str], None] = print,
) -> Path:
    """Save into `workspace`, then rename to `final_dir`; an old `final_dir` is replaced."""
    staging = workspace / "converted"
    gen = model.generation_config
    gen.eos_token_id = stop_token_ids(gen.eos_token_id, tokenizer, extra_eos_tokens)
    if gen.pad_token_id is None:
        gen.pad_token_id = (
            tokenizer.pad_token_id if tokenizer.pad_token_id is not None else gen.eos_token_id[0]
        )
    progress(f"saving dense weights (stop tokens {gen.eos_token_id})")
    model.save_pretrained(staging)  # also writes generation_config.json
    tokenizer.save_pretrained(staging)
    write_marker(staging, info)  # last: marks the folder complete
    if final_dir.exists():  # re-pull (other dtype, --force, or a foreign incomplete folder)
        previous = workspace / "previous"
        os.rename(final_dir, previous)  # removed with the workspace
        try:
            os.rename(staging, final_dir)
        except OSError:
            os.rename(previous, final_dir)
            raise
    else:
        os.rename(staging, final_dir)
    progress(f"converted model at {final_dir}")
    return final_dir
