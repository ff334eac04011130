"""The greedy exactness criterion shared by the tiny-model and real-model tests.

Equal token for token, or, where floating point could flip a near-tie, HF's rule: at the first
divergence the naive reference's r gives both tokens the same score (allclose).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from cos import SamplingParams


@torch.inference_mode()
def assert_same_greedy(out: Sequence[int], ref: Sequence[int], prompt: Sequence[int], models, combination,
                       rtol: float = 1e-4) -> None:
    out, ref = list(out), list(ref)
    if out == ref:
        return
    i = next((i for i, (a, b) in enumerate(zip(out, ref)) if a != b), None)
    assert i is not None, f"one output is a prefix of the other: {len(out)} vs {len(ref)} tokens"
    seq = torch.tensor([*prompt, *ref[:i]])
    logits = [m(input_ids=seq[None].to(m.device)).logits[0, -1:].float().cpu() for m in models]
    r = combination.distribution(logits, SamplingParams(1.0))[0]
    assert torch.allclose(r[out[i]], r[ref[i]], rtol=rtol), (
        f"diverged at token {i}: {out[i]} vs {ref[i]}, r = {float(r[out[i]]):.6g} vs {float(r[ref[i]]):.6g}")
