"""The vLLM backend against the HF engine: greedy tokens, log r, batching, speculative decoding."""

from __future__ import annotations

import pytest
import torch
from vllm_cases import COMPOSITES, GREEDY, MAX_NEW, PROMPTS, SAMPLED, assert_greedy_equal, assert_log_r_close, floor

from cos import Engine, SamplingParams
from cos.methods.reference import reference_generate

CASES = [(name, spec) for name in COMPOSITES for spec in (False, True)]
IDS = [f"{name}-{'spec' if spec else 'standard'}" for name, spec in CASES]


@pytest.fixture(scope="session")
def hf_greedy(hf_sides):
    """name -> per prompt: (prompt ids, cos.Engine greedy tokens, reference_generate greedy tokens)."""
    out = {}
    for name, (_, kind, kw, _) in COMPOSITES.items():
        side = hf_sides[name]
        engine = Engine.from_pretrained(side.paths, method=kind, dtype="float32", **kw)
        rows = []
        for prompt in PROMPTS:
            ids = engine.tokenizer(prompt)["input_ids"] if isinstance(prompt, str) else list(prompt)
            fast = engine.generate(ids, max_new_tokens=MAX_NEW, temperature=0, eos_token_ids=[]).tokens
            naive = reference_generate(side.models, side.combination, ids, MAX_NEW, GREEDY)
            rows.append((ids, fast, naive))
        out[name] = rows
    return out


@pytest.mark.parametrize("name,speculative", CASES, ids=IDS)
def test_greedy_equals_hf_engine_and_reference(name, speculative, engines, hf_greedy, hf_sides):
    engine = engines(name, speculative)
    outs = engine.generate(PROMPTS, max_new_tokens=MAX_NEW, temperature=0, eos_token_ids=[])  # one batch
    for out, (ids, fast, naive) in zip(outs, hf_greedy[name]):
        assert fast == naive  # the HF engine's own exactness, as a sanity check of the references
        log_r_at = lambda j, ids=ids, out=out: hf_sides[name].log_r(ids + out.token_ids[:j], GREEDY)[-1]  # noqa: E731
        assert_greedy_equal(out.token_ids, fast, log_r_at)
        assert out.text == engine.tokenizer.decode(out.token_ids, skip_special_tokens=True)
    if speculative:  # drafts really went through vLLM's rejection sampler; some accepted, some not
        drafted = sum(o.spec["draft_tokens"] for o in outs)
        accepted = sum(o.spec["accepted_tokens"] for o in outs)
        assert 0 < accepted < drafted
    else:
        assert all(o.spec is None for o in outs)


@pytest.mark.parametrize("params", [GREEDY, SAMPLED, SamplingParams(temperature=1.5)],
                         ids=["greedy", "T0.7-k40-p0.9", "T1.5"])
@pytest.mark.parametrize("name", list(COMPOSITES))
def test_logprobs_are_the_combination_of_member_logits(name, params, engines):
    """Exact math: log r returned to the user == Combination.distribution(vLLM's member logits).log()."""
    engine = engines(name)
    engine.llm.apply_model(lambda model: setattr(model, "recorded", []))
    try:
        out = engine.generate([PROMPTS[1]], max_new_tokens=8, temperature=params.temperature, top_k=params.top_k,
                              top_p=params.top_p, seed=1, eos_token_ids=[], logprobs="full")[0]
        recorded = engine.llm.apply_model(lambda model: model.recorded)[0]
    finally:
        engine.llm.apply_model(lambda model: setattr(model, "recorded", None))
    assert len(recorded) == len(out.token_ids)  # one call per step: prefill, then 1-row decode steps
    combination = engines.spec(name).combination
    for step, (member_logits, row_params, log_r) in enumerate(recorded):
        assert row_params == [params]  # the request's CoS parameters reached compute_logits
        want = combination.distribution(member_logits, params).log()[0]
        assert_log_r_close(log_r[0], want, atol=1e-6)
        assert_log_r_close(out.full_logprobs[step], want, atol=1e-5)  # what vLLM hands back (float32 -> python)


@pytest.mark.parametrize("params", [GREEDY, SAMPLED], ids=["greedy", "T0.7-k40-p0.9"])
@pytest.mark.parametrize("name,speculative", CASES, ids=IDS)
def test_generation_logprobs_are_log_r(name, speculative, params, engines, hf_sides):
    """vLLM's full-vocabulary logprobs at every generated position equal log r of the HF engine."""
    engine = engines(name, speculative)
    prompts = PROMPTS[:4]
    outs = engine.generate(prompts, max_new_tokens=12, temperature=params.temperature, top_k=params.top_k,
                           top_p=params.top_p, seed=3, eos_token_ids=[], logprobs="full")
    for prompt, out in zip(prompts, outs):
        ids = engine.encode(prompt)
        want = hf_sides[name].log_r(ids + out.token_ids, params)[len(ids) - 1 : -1]  # [N, V]
        assert_log_r_close(out.full_logprobs, want, floor(params))


@pytest.mark.parametrize("speculative", [False, True], ids=["standard", "spec"])
def test_logprobs_of_chosen_tokens_and_top_k_without_the_vocabulary(speculative, engines):
    """logprobs=True: log r of each chosen token only; k: the top k per step too; "full" only when asked."""
    engine = engines("we2", speculative)
    kw = dict(max_new_tokens=10, temperature=0.8, top_k=50, seed=4, eos_token_ids=[])
    full, chosen, top = (engine.generate(PROMPTS[:2], logprobs=mode, **kw) for mode in ("full", True, 3))
    for f, c, t in zip(full, chosen, top):
        assert f.token_ids == c.token_ids == t.token_ids  # same seed, same draws
        want = f.full_logprobs.gather(1, torch.tensor(f.token_ids)[:, None])[:, 0]
        for out in (f, c, t):
            assert out.logprobs.shape == (len(out.token_ids),) and torch.allclose(out.logprobs, want, atol=1e-6)
        assert c.full_logprobs is None and c.top_logprobs is None and t.full_logprobs is None
        for step, (row, token) in enumerate(zip(t.top_logprobs, t.token_ids)):
            assert token in row and len(row) in (3, 4)  # the top 3, and the chosen token when it is not among them
            best = f.full_logprobs[step].topk(3)
            assert set(best.indices.tolist()) <= set(row)
            assert all(abs(row[i] - v) <= 1e-6 for i, v in zip(best.indices.tolist(), best.values.tolist()))
    with pytest.raises(ValueError, match="logprobs must be False, True"):
        engine.generate(PROMPTS[:1], logprobs="all", **kw)


@pytest.mark.parametrize("name", list(COMPOSITES))
def test_prompt_logprobs_are_log_r(name, engines, hf_sides):
    engine = engines(name)
    seqs = [engine.encode(p) for p in PROMPTS[:3]]
    for params in (GREEDY, SAMPLED):
        got = engine.prompt_logprobs(seqs, temperature=params.temperature, top_k=params.top_k, top_p=params.top_p)
        for seq, g in zip(seqs, got):
            assert_log_r_close(g, hf_sides[name].log_r(seq, params)[:-1], floor(params))


@pytest.mark.parametrize("speculative", [False, True], ids=["standard", "spec"])
@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_batch_equals_one_at_a_time(speculative, temperature, engines):
    engine = engines("we2", speculative)
    batch = engine.generate(PROMPTS, max_new_tokens=MAX_NEW, temperature=temperature, seed=11, eos_token_ids=[])
    alone = [engine.generate([p], max_new_tokens=MAX_NEW, temperature=temperature, seed=11, eos_token_ids=[])[0]
             for p in PROMPTS]
    assert [tuple(o) for o in batch] == [tuple(o) for o in alone]


def test_mixed_parameters_in_one_speculative_batch(engines, hf_sides):
    """Rows of one step map to their own request's parameters, also with several draft rows per request."""
    from vllm import SamplingParams as VllmSamplingParams

    from cos.vllm_backend.request_params import extra_args

    engine = engines("we3", speculative=True)
    mixed = [GREEDY, SAMPLED, SamplingParams(temperature=1.3), GREEDY, SamplingParams(temperature=0.5, top_k=5)]
    prompts = [engine.encode(p) for p in PROMPTS[: len(mixed)]]
    sampling = [VllmSamplingParams(temperature=0.0 if p.greedy else 1.0, seed=5, max_tokens=10, ignore_eos=True,
                                   logprobs=-1, extra_args=extra_args(p)) for p in mixed]
    outs = engine.llm.generate([{"prompt_token_ids": ids} for ids in prompts], sampling, use_tqdm=False)
    for ids, params, out in zip(prompts, mixed, outs):
        tokens = list(out.outputs[0].token_ids)
        want = hf_sides["we3"].log_r(ids + tokens, params)[len(ids) - 1 : -1]
        assert_log_r_close(engine._dense(out.outputs[0].logprobs), want, floor(params))
