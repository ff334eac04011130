"""The naive reference: standard collaborative decoding with no KV cache and no speculation.

Every step runs every model over the whole sequence and draws one token from r. It shares nothing
with the fast paths but the combination and sampling math, so tests can hold every accelerated
method against it (CONTRIBUTING.md §9).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedModel

from ..combination import Combination
from ..sampling import SamplingParams, pick


@torch.inference_mode()
def reference_generate(
    models: Sequence[PreTrainedModel],
    combination: Combination,
    prompt: Sequence[int],
    max_new_tokens: int,
    params: SamplingParams,
    generator: torch.Generator | None = None,
) -> list[int]:
    seq = torch.tensor(list(prompt), dtype=torch.long)
    out: list[int] = []
    for _ in range(max_new_tokens):
        logits = [m(input_ids=seq[None].to(m.device)).logits[0, -1:].to(seq.device) for m in models]  # n × [1, V]
        token = pick(combination.distribution(logits, params), params.greedy, generator)
        seq = torch.cat([seq, token])
        out.append(int(token))
    return out
