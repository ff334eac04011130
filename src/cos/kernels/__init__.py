"""CPU kernels compiled at first use (torch.utils.cpp_extension), with torch's path as the fallback.

Three kernels, each computing every output row in one fixed order, so that row i of a block is bitwise
row i computed alone (kernels/invariance.py says why that matters), in two builds: AVX-512 (F, BW, VL)
and AVX2 + FMA for the CPUs without it (build.py picks by the CPU's flags):
- `bf16_linear` and `f32_linear` (through `row_linear`): F.linear for 1..16 rows. They stream W once
  per call whatever the row count (at a few rows the cost is reading W), so a verify block of 6 costs
  about what a one-token step costs on AVX-512 (1.7x a step on a 2-core AVX2 CPU, where torch's bf16
  block costs 4.9x); where the CPU has avx512_bf16 the bf16 inner product is vdpbf16ps (`build.native_bf16`).
- `row_attention` (attention.py): attention over the KV cache, one (head, query row) at a time.
`install_row_kernels(model)` routes one model's Linear layers and attention through them (the
default of `load_member`, the runner and `Engine.from_pretrained`: `kernels=auto`); `kernels=False`
keeps torch's ops, whose block rows differ in the last bits. `row_invariance(model)` says whether a
model's rows are bitwise invariant here, and if not why. Measurements: docs/benchmarks.md.
"""

from .attention import install_row_attention, uninstall_row_attention
from .build import available, failure
from .install import install_fast_linears, installed_count, uninstall_fast_linears
from .invariance import CHECKED_MODEL_TYPES, install_row_kernels, row_invariance, uninstall_row_kernels
from .linear import MAX_ROWS, kernel_applies, row_linear

__all__ = ["CHECKED_MODEL_TYPES", "MAX_ROWS", "available", "failure", "install_fast_linears", "install_row_attention",
           "install_row_kernels", "installed_count", "kernel_applies", "row_invariance", "row_linear",
           "uninstall_fast_linears", "uninstall_row_attention", "uninstall_row_kernels"]
