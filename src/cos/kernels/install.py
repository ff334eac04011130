"""Per-model switch: route the forward of every bf16 CPU nn.Linear of one model through `bf16_linear`.

Only the given model changes (an instance attribute `forward` on each of its Linear modules); torch
itself is never patched. Calls the kernel does not cover (fp32 or CUDA input, more than 16 rows, a
gradient wanted, code being traced by torch.compile) go to the module's original forward.
"""

from __future__ import annotations

import time

import torch
from torch import nn

from . import build
from .linear import kernel_applies, kernel_linear

_MARK = "_cos_fast_linear_original"


def _fast_forward(module: nn.Linear, original):
    def forward(x: torch.Tensor) -> torch.Tensor:
        # torch.compile traces the original forward (the extension call would break the graph)
        if not torch.compiler.is_compiling() and kernel_applies(x, module.weight, module.bias):
            return kernel_linear(x, module.weight, module.bias)
        return original(x)

    return forward


def install_fast_linears(model: nn.Module) -> int:
    """Swap in the kernel path on each bf16 CPU nn.Linear of `model`; how many were changed.

    0 when the kernel is unavailable here (no AVX-512, no compiler: the reason is logged once) or the
    model has no bf16 CPU Linear. Installing twice changes nothing the second time.
    """
    if not build.available():
        return 0
    changed = 0
    for module in model.modules():
        if not isinstance(module, nn.Linear) or hasattr(module, _MARK):
            continue
        w = module.weight
        if w.dtype != torch.bfloat16 or w.device.type != "cpu":
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


def _best_seconds(fn, repeats: int = 5) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


@torch.inference_mode()
def kernel_pays_off(model: nn.Module) -> tuple[bool, str]:
    """Measure, on this machine, the model's widest non-head Linear at 1 and 6 rows (a draft step and a
    verify block) through torch and through the kernel; True when the kernel is faster in total.
    The kernel was measured on a CPU without native bf16; where torch has it, torch may win: ask."""
    if not build.available():
        return False, f"kernel unavailable: {build.failure()}"
    linears = [m for m in model.modules() if isinstance(m, nn.Linear) and m.weight.dtype == torch.bfloat16
               and m.weight.device.type == "cpu"]
    if not linears:
        return False, "no bf16 CPU Linear layers"
    head = max(l.out_features for l in linears)
    probe = max((l for l in linears if l.out_features < head) or linears, key=lambda l: l.weight.numel())
    w = probe.weight
    ours = theirs = 0.0
    for rows in (1, 6):
        x = torch.randn(rows, w.shape[1], dtype=torch.bfloat16)
        theirs += _best_seconds(lambda: torch.nn.functional.linear(x, w))
        ours += _best_seconds(lambda: kernel_linear(x, w, None))
    verdict = ours < theirs
    return verdict, f"{tuple(w.shape)} at 1 + 6 rows: kernel {1000 * ours:.2f} ms, torch {1000 * theirs:.2f} ms"
