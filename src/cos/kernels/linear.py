"""`row_linear`: F.linear for bf16 or fp32 CPU inputs of a few rows through the kernels (AVX-512 or AVX2), else torch."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from . import build

MAX_ROWS = 16  # past this many rows torch's GEMM is the better path (a prefill, which every method shares)
WIDEN_ROWS = 256  # bf16 on the AVX2 build, past this many rows: fp32 GEMM on widened operands (below)
DTYPES = (torch.bfloat16, torch.float32)


def max_rows(dtype: torch.dtype) -> float:
    """Rows up to which a call goes through a kernel: MAX_ROWS, except bf16 on the AVX2 build. There
    torch's bf16 GEMM has no native bf16 to use and costs about a one-row call per row (1.3 ms per row
    of the 1.5B's 8960x1536 weight at 900 rows, 2-core AVX2 EPYC): every row goes through the kernel
    (0.3 ms per row), past WIDEN_ROWS through torch's fp32 GEMM on widened copies (0.2 ms per row at 900
    rows, 0.3 at 256). A 900-token prefill of the 1.5B: 117 s with torch's bf16 GEMM."""
    return math.inf if dtype == torch.bfloat16 and build.variant() == "avx2" else MAX_ROWS


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
    return 0 < rows <= max_rows(x.dtype)


def row_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x @ weight.T (+ bias). Through a kernel where one applies and is available, else F.linear.

    Kernel rows are independent: row i of a block's result equals the result for row i alone, bitwise.
    """
    if not kernel_applies(x, weight, bias):
        return F.linear(x, weight, bias)
    return kernel_linear(x, weight, bias)


def kernel_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """The kernel's path for a call that `kernel_applies` accepted (F.linear where it is unavailable;
    bf16 past WIDEN_ROWS rows, which only the AVX2 build lets in: torch's fp32 GEMM on widened copies)."""
    ext = build.load()
    if ext is None:
        return F.linear(x, weight, bias)
    if x.dtype == torch.bfloat16 and x.numel() > WIDEN_ROWS * x.shape[-1]:  # only where max_rows let it in
        return F.linear(x.float(), weight.float(), None if bias is None else bias.float()).bfloat16()
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    b = None if bias is None else bias.contiguous()
    if x.dtype == torch.bfloat16:
        y = ext.bf16_linear(x2, weight.contiguous(), b, build.native_bf16())
    else:
        y = ext.f32_linear(x2, weight.contiguous(), b)
    return y.reshape(*x.shape[:-1], weight.shape[0])
