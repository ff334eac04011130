"""`row_attention`: a transformers attention implementation whose rows do not depend on the block.

A verify block of M query rows and a one-token step must give bitwise the same row for the same
position, or greedy CoS parts from greedy standard decoding on near-ties. torch's SDPA takes
different reduction paths for 1 and for M queries; the kernel (row_attention.cpp) computes each
(head, query row) on its own, over the keys it may see, in one fixed order (its header says which).

`install_row_attention(model)` registers the implementation with transformers under the name
`cos_rows` and switches one model to it. Calls it does not cover fall back to SDPA: more than
`MAX_ROWS` query rows (a prefill, which every method shares), CUDA or fp16 tensors, dropout, a
sliding window, soft-capping or attention sinks, a non-boolean mask.
"""

from __future__ import annotations

import torch
from torch import nn

from . import build
from .linear import MAX_ROWS

NAME = "cos_rows"
_PREVIOUS = "_cos_attention_previous"


def covers(query: torch.Tensor, key: torch.Tensor, attention_mask: torch.Tensor | None, dropout: float = 0.0,
           **kwargs) -> bool:
    """Whether the kernel computes this attention call (else SDPA does)."""
    if query.device.type != "cpu" or query.dtype not in (torch.bfloat16, torch.float32):
        return False
    if query.dtype != key.dtype or query.shape[2] > MAX_ROWS or query.shape[-1] > 256 or dropout:
        return False
    if any(kwargs.get(k) is not None for k in ("sliding_window", "softcap", "s_aux")):
        return False
    return attention_mask is None or attention_mask.dtype == torch.bool


def row_attention_forward(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                          attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                          **kwargs):
    """transformers' attention signature: query [B, Hq, M, D], key/value [B, Hkv, T, D] (the whole cache);
    returns ([B, M, Hq, D], None)."""
    ext = build.load()
    if ext is None or not covers(query, key, attention_mask, dropout, **kwargs):
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout,
                                      **kwargs)
    if scaling is None:
        scaling = query.shape[-1] ** -0.5
    if attention_mask is not None:  # sdpa_mask's [B, 1, M, T]: the last T columns are this cache's keys
        attention_mask = attention_mask[..., -key.shape[2]:]
    return ext.row_attention(query, key, value, attention_mask, float(scaling)), None


def register() -> None:
    """Make `cos_rows` a name transformers accepts (with SDPA's boolean masks)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NAME, row_attention_forward)
    AttentionMaskInterface.register(NAME, sdpa_mask)


def install_row_attention(model: nn.Module) -> bool:
    """Switch `model` to `cos_rows` attention; False where the kernel is unavailable here."""
    if not build.available():
        return False
    current = model.config._attn_implementation
    if current == NAME:
        return True
    register()
    setattr(model, _PREVIOUS, current)
    model.set_attn_implementation(NAME)
    return True


def uninstall_row_attention(model: nn.Module) -> bool:
    """Give `model` back the attention it had before `install_row_attention`."""
    if not hasattr(model, _PREVIOUS):
        return False
    model.set_attn_implementation(getattr(model, _PREVIOUS))
    delattr(model, _PREVIOUS)
    return True
