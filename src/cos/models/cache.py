"""Where converted models live, when a folder counts as complete, and pull workspaces.

A converted folder is only ever created by renaming a finished temp folder into place, and the
marker file is written last inside it, so "marker present" means "complete". Temp workspaces sit
beside the final folder (same filesystem, so the rename is atomic) and carry host and pid in their
name, so the next pull can tell a workspace left by a killed run from one still in use.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from cos.models.errors import DiskSpaceError

MARKER = "cos_packaged.json"  # written last: its presence means the folder is complete
REQUIRED_FILES = ("config.json", "generation_config.json", "tokenizer_config.json", MARKER)
STALE_AFTER_S = 24 * 3600  # a workspace whose owner cannot be checked is stale after this long


def default_cache_dir() -> Path:
    """`$COS_MODEL_CACHE`, else the per-user cache folder as platformdirs would choose it."""
    if env := os.environ.get("COS_MODEL_CACHE"):
        return Path(env).expanduser()
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA", Path.home() / "AppData" / "Local"))
        return base / "cos" / "Cache" / "models"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "cos" / "models"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "cos" / "models"


def resolve_cache_dir(cache_dir: str | os.PathLike[str] | None) -> Path:
    return Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()


def is_complete(folder: Path) -> bool:
    """True when every required file and at least one safetensors shard is present."""
    if not folder.is_dir() or not all((folder / f).is_file() for f in REQUIRED_FILES):
        return False
    return any(folder.glob("*.safetensors"))


def read_marker(folder: Path) -> dict[str, Any]:
    try:
        return json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return {}


def write_marker(folder: Path, info: dict[str, Any]) -> None:
    (folder / MARKER).write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")


def _prefix(name: str) -> str:
    return f".{name}.partial-"


def new_workspace(cache: Path, name: str) -> Path:
    """A fresh temp folder beside `cache/name`, tagged with this host and pid."""
    tag = f"{socket.gethostname()}-{os.getpid()}-"
    return Path(tempfile.mkdtemp(prefix=_prefix(name) + tag, dir=cache))


def _owner_alive(folder: Path, name: str) -> bool:
    # name: .<model>.partial-<host>-<pid>-<random>; the host may contain "-", the rest cannot
    host, _, pid_text = folder.name[len(_prefix(name)) :].rpartition("-")[0].rpartition("-")
    try:
        age = time.time() - folder.stat().st_mtime
        pid = int(pid_text)
    except (OSError, ValueError):
        return False
    if host != socket.gethostname() or os.name != "posix":
        return age < STALE_AFTER_S  # cannot ask another host (or Windows, safely) about a pid
    try:
        os.kill(pid, 0)  # signal 0 only checks that the process exists
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    return True


def sweep_stale_workspaces(cache: Path, name: str) -> list[Path]:
    """Remove workspaces of `name` whose pull died (killed, power loss); return what was removed."""
    removed = []
    for folder in cache.glob(_prefix(name) + "*"):
        if folder.is_dir() and not _owner_alive(folder, name):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def check_disk(where: Path, needed: int, what: str) -> None:
    """Fail before writing rather than half way through a multi-GB file."""
    free = shutil.disk_usage(where).free
    if free < needed:
        raise DiskSpaceError(
            f"{what} needs about {needed / 1e9:.2f} GB free in {where}, but only "
            f"{free / 1e9:.2f} GB is available; free {(needed - free) / 1e9:.2f} GB "
            "or choose another folder with --cache-dir / COS_MODEL_CACHE"
        )
