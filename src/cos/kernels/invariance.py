"""Bitwise rows: a verify block's row equals the one-token step's row for the same position.

Greedy CoS is token for token greedy standard decoding only if the logits a verifier computes for a
position inside a block of drafts are bitwise those the standard method computes for it one token at
a time: a difference in the last bits flips near-ties (bf16 rows differed by up to 0.19 in logit
before this existed). A member forward is row-invariant when every op gives row i the same bits
whatever the other rows are:
- every Linear (projections, MLP, LM head): `row_linear` (bf16 and fp32 kernels, install.py);
- attention over the cache: `row_attention` (attention.py);
- RMSNorm, rotary embeddings, SiLU, residual adds, embeddings: torch ops, for the architectures in
  `CHECKED_MODEL_TYPES`, checked op by op and on whole models (tests/test_row_invariance.py), bf16
  and fp32, blocks of 1..16 rows, 1 and 2 threads. Adds and products round the same way in torch's
  vector and scalar loops; transcendental ops (SiLU's exp, rotary's cos/sin) do not always, and
  torch runs the last elements of a tensor (or of a thread's share) through its scalar loop. Whole rows
  stay on the vector loop where a row's length is a multiple of 128 elements (two AVX-512 vectors of
  bf16, four AVX2 ones, and each thread's share of a block) and the head dimension a multiple of 32:
  so those sizes are part of the check (every Llama and Qwen2 release meets them; tiny test models must too).
Blocks of more than `MAX_ROWS` rows are fed in pieces (Member.score), so a long catch-up is
invariant too. The prefill keeps torch's fast path: every method runs the same prefill.

`install_row_kernels(model)` installs both kernels (`uninstall_row_kernels` removes them); `row_invariance(model)` says whether the model's
rows are bitwise invariant here, and if not, why (the engine logs it once and the run's summary
carries it).
"""

from __future__ import annotations

from torch import nn

from . import build
from .attention import NAME, install_row_attention, uninstall_row_attention
from .install import install_fast_linears, installed_count, uninstall_fast_linears
from .linear import DTYPES

# model types whose ops outside Linear and attention were checked row by row (tests/test_row_invariance.py)
CHECKED_MODEL_TYPES = ("llama", "qwen2")


def install_row_kernels(model: nn.Module) -> int:
    """Route `model`'s Linear layers and attention through the row-invariant kernels, where they can
    run (CPU, bf16 or fp32, AVX-512 or AVX2 + FMA, a compiler); how many Linear layers were changed."""
    if next(model.parameters()).device.type != "cpu" or not build.available():
        return 0
    changed = install_fast_linears(model)
    install_row_attention(model)
    return changed


def uninstall_row_kernels(model: nn.Module) -> int:
    """Back to torch's ops on `model`; how many Linear layers were restored."""
    uninstall_row_attention(model)
    return uninstall_fast_linears(model)


def row_invariance(model: nn.Module) -> str | None:
    """None when every row of a block is bitwise the row computed alone; else why not."""
    param = next(model.parameters())
    config = model.config
    if param.device.type != "cpu":
        return f"{param.device.type} forwards (the row-invariant kernels are CPU kernels)"
    if param.dtype not in DTYPES:
        return f"{str(param.dtype).removeprefix('torch.')} weights (the kernels take bfloat16 or float32)"
    if not build.available():
        return f"kernels unavailable here ({build.failure()})"
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    if installed_count(model) < len(linears) or config._attn_implementation != NAME:
        return "kernels=false (torch's GEMM and SDPA round a block's rows differently from a single row's)"
    if config.model_type not in CHECKED_MODEL_TYPES:
        return (f"model type {config.model_type!r} has ops not checked for row invariance "
                f"(checked: {', '.join(CHECKED_MODEL_TYPES)})")
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    if config.intermediate_size % 128 or head_dim % 32:
        return (f"intermediate size {config.intermediate_size} or head dim {head_dim} off the vector loop's "
                f"alignment (multiples of 128 and 32): SiLU or rotary rows may round differently")
    return None

