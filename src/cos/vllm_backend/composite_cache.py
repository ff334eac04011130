"""Composite folders built once per (members, combination) and reused: what the runner's backend=vllm loads.

    folder = cached_composite(["/m/expert", "/m/amateur"], {"kind": "cd", "alpha": 0.1})

The folder is `<cache>/composites/<key>`, key = a digest of the members' resolved paths, the combination
and the composite layout (LAYOUT: bumped when build_composite writes something new, so an older folder
is never reused). Members are linked, not copied, so a folder costs a few kB. `<cache>` is
$COS_COMPOSITE_CACHE, else the model cache's parent (cos.models.cache: $COS_MODEL_CACHE, ~/.cache/cos).
A folder is built under a temporary name and renamed into place: concurrent runs never see half of one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from .composite import build_composite

LAYOUT = 2  # 2: a neutral generation_config.json (no member's sampling defaults)


def composite_cache_dir() -> Path:
    if env := os.environ.get("COS_COMPOSITE_CACHE"):
        return Path(env).expanduser()
    from ..models.cache import default_cache_dir

    return default_cache_dir().parent / "composites"


def cache_key(members: Sequence[str | os.PathLike], combination: Mapping) -> str:
    what = {"layout": LAYOUT, "members": [str(Path(m).resolve()) for m in members], "combination": dict(combination)}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:20]


def cached_composite(members: Sequence[str | os.PathLike], combination: Mapping,
                     cache_dir: str | os.PathLike | None = None) -> Path:
    """The composite folder of `members` (config order) with `combination` ({kind, **make_combination
    kwargs}), built on first use."""
    root = Path(cache_dir) if cache_dir is not None else composite_cache_dir()
    folder = root / cache_key(members, combination)
    if (folder / "config.json").is_file():
        return folder
    root.mkdir(parents=True, exist_ok=True)
    kwargs = dict(combination)
    tmp = root / f".{folder.name}.{os.getpid()}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    build_composite(members, tmp, kwargs.pop("kind"), **kwargs)
    try:
        os.replace(tmp, folder)
    except OSError:  # another process put it there first
        shutil.rmtree(tmp, ignore_errors=True)
        if not (folder / "config.json").is_file():
            raise
    return folder
