"""Compile the C++ kernels at first use, once per source version, and say why when they can't be used.

The build goes to ``$TORCH_EXTENSIONS_DIR/<name>`` when that variable is set, else to
``~/.cache/cos/kernels/<name>``, where ``<name>`` carries a hash of the source and of torch's version:
a changed kernel or torch gets a fresh build, an unchanged one loads the cached ``.so`` in well under a
second. torch's own file lock in the build folder keeps concurrent processes from building twice; a
lock here does the same for threads. ``COS_KERNELS=0`` turns the kernels off.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from pathlib import Path
from types import ModuleType

import torch

log = logging.getLogger(__name__)

# One translation unit per instruction set, compiled in this order (bindings.cpp defines the Python
# module with the same functions either way): AVX-512 where the CPU has F, BW and VL, else AVX2 + FMA
# (Zen 2/3, client Intel parts). Each build computes every row in one fixed order (its headers say
# which); the two orders differ, so two kinds of machine differ in the last bits, one machine never.
COMMON = ("tiles.cpp", "row_attention_common.cpp")
VARIANTS = {
    "avx512": dict(sources=COMMON + ("bf16_linear.cpp", "f32_linear.cpp", "row_attention.cpp"),
                   cflags=["-O3", "-mavx512f", "-mavx512bw", "-mavx512vl", "-fopenmp"],
                   needed=("avx512f", "avx512bw", "avx512vl")),
    "avx2": dict(sources=COMMON + ("bf16_linear_avx2.cpp", "f32_linear_avx2.cpp", "row_attention_avx2.cpp"),
                 cflags=["-O3", "-mavx2", "-mfma", "-fopenmp"], needed=("avx2", "fma")),
}
LAST = ("row_attention_op.cpp", "bindings.cpp")
LDFLAGS = ["-fopenmp"]

_lock = threading.Lock()
_module: ModuleType | None = None
_failure: str | None = None
_native: bool | None = None
_variant: str | None = None


def cpu_flags() -> set[str] | None:
    """The CPU's feature flags from /proc/cpuinfo, or None where that file is not there."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return None


def cpu_variant() -> tuple[str | None, str]:
    """(the build this CPU runs: "avx512", "avx2" or None, why not the AVX-512 one / why none)."""
    flags = cpu_flags()
    if flags is None:  # no /proc/cpuinfo: torch's own dispatch level (AVX512 implies F/BW/VL/DQ, AVX2 FMA)
        cap = torch.backends.cpu.get_cpu_capability()
        variant = "avx512" if cap.startswith("AVX512") else "avx2" if cap.startswith("AVX2") else None
        return variant, f"torch CPU capability is {cap}"
    missing = {name: [f for f in v["needed"] if f not in flags] for name, v in VARIANTS.items()}
    why = f"the CPU lacks {', '.join(missing['avx512'])}"
    if not missing["avx512"]:
        return "avx512", ""
    if not missing["avx2"]:
        return "avx2", why
    return None, f"{why} and {', '.join(missing['avx2'])}"


def cpu_supported() -> tuple[bool, str]:
    """(whether this CPU runs a build of the kernels, why not)."""
    variant, why = cpu_variant()
    return variant is not None, why


def cpu_has_native_bf16() -> bool:
    """Whether this CPU has avx512_bf16 (vdpbf16ps), the native path's instruction."""
    return "avx512_bf16" in (cpu_flags() or set())


def native_bf16() -> bool:
    """Whether the kernel takes its native path (vdpbf16ps): the CPU has avx512_bf16, and
    COS_KERNELS_NATIVE is not 0. On a Zen 4 EPYC it makes a verify block cost what a one-token step
    costs (the split path's block cost 1.35x a step), for 2-3% more per step (kernels/__init__.py)."""
    global _native
    if _native is None:
        _native = cpu_has_native_bf16() and os.environ.get("COS_KERNELS_NATIVE", "1") != "0"
    return _native


def build_dir(name: str) -> Path:
    root = os.environ.get("TORCH_EXTENSIONS_DIR") or Path.home() / ".cache" / "cos" / "kernels"
    return Path(root) / name


def extension_name(source: str, cflags: list[str]) -> str:
    digest = hashlib.sha256((source + torch.__version__ + " ".join(cflags)).encode()).hexdigest()[:12]
    return f"cos_kernels_{digest}"


def source_of(variant: str) -> str:
    """The translation unit of one build: its sources in order, concatenated."""
    names = VARIANTS[variant]["sources"] + LAST
    return "\n".join(Path(__file__).with_name(n).read_text() for n in names)


def load() -> ModuleType | None:
    """The compiled extension, or None (the reason logged once and kept in `failure()`)."""
    global _module, _failure, _variant
    if _module is not None or _failure is not None:
        return _module
    with _lock:
        if _module is not None or _failure is not None:
            return _module
        if os.environ.get("COS_KERNELS", "1") == "0":
            _failure = "COS_KERNELS=0"
        else:
            variant, why = cpu_variant()
            if variant is None:
                _failure = why
        if _failure is None:
            try:
                from torch.utils.cpp_extension import load_inline

                source, cflags = source_of(variant), VARIANTS[variant]["cflags"]
                name = extension_name(source, cflags)
                folder = build_dir(name)
                folder.mkdir(parents=True, exist_ok=True)
                _module = load_inline(name, cpp_sources=[source], extra_cflags=cflags,
                                      extra_ldflags=LDFLAGS, build_directory=str(folder))
                _variant = variant
            except Exception as exc:  # no compiler, no ninja, a compile error: keep torch's path
                lines = str(exc).strip().splitlines()
                _failure = f"{type(exc).__name__}: {lines[-1] if lines else ''}"
        if _failure is not None:
            log.warning("cos.kernels: fast bf16 linear unavailable, using torch's F.linear (%s)", _failure)
        return _module


def failure() -> str | None:
    """Why the kernel is not available (after `load()` returned None), else None."""
    return _failure


def variant() -> str | None:
    """The build loaded here ("avx512" or "avx2"), None where none is."""
    load()
    return _variant


def available() -> bool:
    return load() is not None
