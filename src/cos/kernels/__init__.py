"""CPU kernels compiled at first use (torch.utils.cpp_extension), with torch's path as the fallback.

`bf16_linear` computes F.linear for bf16 inputs of 1..16 rows on AVX-512 CPUs (F, BW, VL). On CPUs
without avx512_bf16 / AMX, torch's bf16 GEMM costs 3-6x more for 4-8 rows than for one; this kernel
streams W once per call whatever the row count, and rounds each output row identically whatever the
number of rows (row i of a block equals the one-row product, bitwise; the thread count doesn't matter
either). `install_fast_linears(model)` routes one model's bf16 nn.Linear layers through it,
`uninstall_fast_linears(model)` undoes that. Members loaded with `kernels="auto"` (the default of
`load_member`, the runner and `Engine.from_pretrained`) get it where `kernel_pays_off` measures it
faster than torch on this machine; `kernels=True` forces it, False never installs it.

Measured on the 2-core Xeon (AVX-512, no avx512_bf16), quiet, 2 threads, `scripts/bench/kernel.py`:
8960x1536 takes 0.57 ms at M=1 (torch 1.05) and 0.85 ms at M=6 (torch 5.03); a 0.5B Qwen forward
after 200 tokens takes 88 ms for 1 new token (stock 108) and 77 ms for 6 (stock 250).
Where the CPU has avx512_bf16 (Zen 4, Sapphire Rapids) the kernel's inner product is vdpbf16ps
(`build.native_bf16`; rows stay independent of M). On a 2-core Zen 4 EPYC, Qwen pair, HumanEval, a
1.5B call of cd_chef's mix of verify blocks and steps took 0.090 s against 0.118 s on the split path,
a one-token step 0.088 against 0.086 s: a verify block now costs what a step costs.
"""

from .build import available, failure
from .install import install_fast_linears, installed_count, kernel_pays_off, uninstall_fast_linears
from .linear import MAX_ROWS, bf16_linear, kernel_applies

__all__ = ["MAX_ROWS", "available", "bf16_linear", "failure", "install_fast_linears", "installed_count", "kernel_pays_off",
           "kernel_applies", "uninstall_fast_linears"]
