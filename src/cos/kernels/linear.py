"""`row_linear`: F.linear for bf16 or fp32 CPU inputs of a few rows through the kernels (AVX-512 or AVX2), else torch."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from . import build

MAX_ROWS = 16  # past this many rows torch's GEMM is the better path (a prefill, which every method shares)
DTYPES = (torch.bfloat16, torch.float32)


def kernel_applies(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> bool:
    """Whether a kernel computes this F.linear call: bf16 or fp32 on CPU (one dtype for x, weight and
    bias), few rows, no gradient wanted."""
    if x.dtype not in DTYPES or weight.dtype != x.dtype or x.device.type != "cpu":
        return False
    if weight.device.type != "cpu" or weight.dim() != 2 or x.dim() == 0 or x.shape[-1] != weight.shape[1]:
        return False
    if bias is not None and (bias.dtype != x.dtype or bias.device.type != "cpu"):
        return False
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad
                                    or (bias is not None and bias.requires_grad)):
        return False
    rows = x.numel() // max(x.shape[-1], 1)
    return 0 < rows <= MAX_ROWS


def row_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x @ weight.T (+ bias). Through a kernel where one applies and is available, else F.linear.

    Kernel rows are independent: row i of a block's result equals the result for row i alone, bitwise.
    """
    if not kernel_applies(x, weight, bias):
        return F.linear(x, weight, bias)
    return kernel_linear(x, weight, bias)


def kernel_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """The kernel's path for a call that `kernel_applies` accepted (F.linear where it is unavailable)."""
    ext = build.load()
    if ext is None:
        return F.linear(x, weight, bias)
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    b = None if bias is None else bias.contiguous()
    if x.dtype == torch.bfloat16:
        y = ext.bf16_linear(x2, weight.contiguous(), b, build.native_bf16())
    else:
        y = ext.f32_linear(x2, weight.contiguous(), b)
    return y.reshape(*x.shape[:-1], weight.shape[0])
