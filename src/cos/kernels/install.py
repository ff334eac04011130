"""Per-model switch: route the forward of every bf16 or fp32 CPU nn.Linear of one model through `row_linear`.

Only the given model changes (an instance attribute `forward` on each of its Linear modules); torch
itself is never patched. Calls the kernels do not cover (fp16 or CUDA input, more than 16 rows, a
gradient wanted, code being traced by torch.compile) go to the module's original forward.
"""

from __future__ import annotations

import torch
from torch import nn

from . import build
from .linear import DTYPES, kernel_applies, kernel_linear

_MARK = "_cos_fast_linear_original"


def _fast_forward(module: nn.Linear, original):
    def forward(x: torch.Tensor) -> torch.Tensor:
        # torch.compile traces the original forward (the extension call would break the graph)
        if not torch.compiler.is_compiling() and kernel_applies(x, module.weight, module.bias):
            return kernel_linear(x, module.weight, module.bias)
        return original(x)

    return forward


def install_fast_linears(model: nn.Module) -> int:
    """Swap in the kernel path on each bf16 or fp32 CPU nn.Linear of `model`; how many were changed.

    0 when the kernels are unavailable here (neither AVX-512 nor AVX2 + FMA, no compiler: the reason is
    logged once) or the model has no bf16 or fp32 CPU Linear. Installing twice changes nothing the second time.
    """
    if not build.available():
        return 0
    changed = 0
    for module in model.modules():
        if not isinstance(module, nn.Linear) or hasattr(module, _MARK):
            continue
        w = module.weight
        if w.dtype not in DTYPES or w.device.type != "cpu":
            continue
        original = module.__dict__.get("forward")  # an instance forward set by someone else, if any
        setattr(module, _MARK, original)
        fallback = original if original is not None else module.__class__.forward.__get__(module)
        module.forward = _fast_forward(module, fallback)
        changed += 1
    return changed


def uninstall_fast_linears(model: nn.Module) -> int:
    """Undo `install_fast_linears` on `model`; how many Linear modules were restored."""
    restored = 0
    for module in model.modules():
        if not hasattr(module, _MARK):
            continue
        original = getattr(module, _MARK)
        delattr(module, _MARK)
        if original is None:
            del module.forward
        else:
            module.forward = original
        restored += 1
    return restored


def installed_count(model: nn.Module) -> int:
    return sum(1 for m in model.modules() if hasattr(m, _MARK))
