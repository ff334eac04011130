"""CPU kernels compiled at first use (torch.utils.cpp_extension), with torch's path as the fallback.

`bf16_linear` computes F.linear for bf16 inputs of 1..16 rows on AVX-512 CPUs without avx512_bf16,
where torch's bf16 GEMM costs 3-6x more for 4-8 rows than for one; each output row is rounded
identically whatever the number of rows. `install_fast_linears(model)` routes one model's bf16
nn.Linear layers through it; `uninstall_fast_linears(model)` undoes that.
"""

from .build import available, failure
from .install import install_fast_linears, installed_count, uninstall_fast_linears
from .linear import MAX_ROWS, bf16_linear, kernel_applies

__all__ = ["MAX_ROWS", "available", "bf16_linear", "failure", "install_fast_linears", "installed_count",
           "kernel_applies", "uninstall_fast_linears"]
