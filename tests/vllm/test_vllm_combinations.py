"""More combinations than WE / CD: mean, proxy-tuning, CD with the plausibility cut, a custom callable."""

from __future__ import annotations

import pytest
from vllm_cases import ENGINE_OPTIONS, GREEDY, PROMPTS, SAMPLED, HFSide, assert_log_r_close, floor

from cos import SamplingParams
from cos.vllm_backend import VllmEngine, build_composite

MORE = {
    "mean3": (("big", "small", "close"), "mean", {}),
    "proxy": (("big", "small", "close"), "proxy_tuning", {}),
    "cd_cut": (("small", "close"), "cd", {"alpha": 0.5, "plausibility": 0.1}),
    "custom": (("big", "small"), "custom", {"target": "tiny_members:logit_mean", "space": "logits"}),
}
# per-member truncation can leave a `logits`-space mean with no token at all (NaN, in the HF engine too)
PARAMS = {"custom": (GREEDY, SamplingParams(temperature=0.7))}


@pytest.mark.parametrize("name", list(MORE))
def test_log_r_of_more_combinations(name, member_dirs, tmp_path):
    members, kind, kw = MORE[name]
    composite = build_composite([member_dirs[m] for m in members], tmp_path / name, kind, **kw)
    side = HFSide(composite)
    engine = VllmEngine(composite, **ENGINE_OPTIONS)
    try:
        seqs = [engine.encode(p) for p in PROMPTS[:2]]
        for params in PARAMS.get(name, (GREEDY, SAMPLED)):
            got = engine.prompt_logprobs(seqs, temperature=params.temperature, top_k=params.top_k, top_p=params.top_p)
            for seq, g in zip(seqs, got):
                assert_log_r_close(g, side.log_r(seq, params)[:-1], floor(params))
        out = engine.generate(PROMPTS[:2], max_new_tokens=8, temperature=0, eos_token_ids=[])
        for prompt, o in zip(PROMPTS[:2], out):  # greedy = argmax r at every step
            ids = engine.encode(prompt)
            assert (side.log_r(ids + o.token_ids, GREEDY)[len(ids) - 1 : -1].argmax(-1).tolist() == o.token_ids)
    finally:
        engine.close()
