#!/usr/bin/env python
"""Build a CoS composite model folder (for vLLM) from member model folders.

    python scripts/build_composite.py OUT MEMBER [MEMBER ...] [--combination we|cd|mean|...] [--weights ...]
    python scripts/build_composite.py /m/we /m/qwen-1.5b /m/qwen-0.5b --combination we --weights 0.5 0.5
    python scripts/build_composite.py /m/cd /m/qwen-1.5b /m/qwen-0.5b --combination cd --alpha 0.1

Then: `vllm serve /m/we` or `cos.vllm_backend.VllmEngine("/m/we")` (see cos/vllm_backend/__init__.py).
Needs only transformers (not vLLM). Bad input exits non-zero with "build_composite: error: ...".
"""

from cos.vllm_backend.composite import main

if __name__ == "__main__":
    main()
