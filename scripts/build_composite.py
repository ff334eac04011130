#!/usr/bin/env python
"""Build a CoS composite model folder (for vLLM) from member model folders.

    python scripts/build_composite.py OUT MEMBER [MEMBER ...] [--combination we|cd|mean|...] [--weights ...]
    python scripts/build_composite.py /m/we /m/qwen-1.5b /m/qwen-0.5b --combination we --weights 0.5 0.5
    python scripts/build_composite.py /m/cd /m/qwen-1.5b /m/qwen-0.5b --combination cd --alpha 0.1

Then: `vllm serve /m/we` or `cos.vllm_backend.VllmEngine("/m/we")` (see cos/vllm_backend/__init__.py).
Needs only transformers (not vLLM). Bad input exits non-zero with "build_composite: error: ...".
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

from cos.vllm_backend.composite import build_composite


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Build a CoS composite model folder for vLLM from member folders.")
    ap.add_argument("out", help="composite folder to write")
    ap.add_argument("members", nargs="+", help="member folders in config order [model, extra_1, ...]")
    ap.add_argument("--combination", default="we", help="we, cd, mean, proxy_tuning, realignment, custom")
    ap.add_argument("--weights", type=float, nargs="+", help="we: one weight per member, summing to 1")
    ap.add_argument("--lam", type=float, help="we (two members): weight of the extra model; realignment: λ")
    ap.add_argument("--alpha", type=float, help="cd: amateur weight α (default 0.1)")
    ap.add_argument("--plausibility", type=float, help="cd: O'Brien & Lewis cut β (default off)")
    ap.add_argument("--target", help="custom: 'package.module:function'")
    ap.add_argument("--space", help="custom: probs, logits or raw-logits")
    ap.add_argument("--copy", action="store_true", help="copy member folders instead of linking them")
    ap.add_argument("--overwrite", action="store_true", help="replace OUT if it exists")
    a = ap.parse_args(argv)
    kwargs = {k: getattr(a, k) for k in ("weights", "lam", "alpha", "plausibility", "target", "space")
              if getattr(a, k) is not None}
    try:
        out = build_composite(a.members, a.out, a.combination, link=not a.copy, overwrite=a.overwrite, **kwargs)
    except (ValueError, FileNotFoundError, FileExistsError) as e:
        raise SystemExit(f"build_composite: error: {e}") from None
    print(json.dumps({"composite": str(out), "members": a.members, "combination": a.combination, **kwargs}))


if __name__ == "__main__":
    main()
