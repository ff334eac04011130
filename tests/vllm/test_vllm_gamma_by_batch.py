"""Draft length chosen per step from the batch size (`speculative_by_batch`, vLLM's dynamic speculation):
greedy output equals standard decoding whatever length each step drafts, 0 included; and the member that
drafts is the composite's own (member_draft.py): weights and KV cache once, no drafter run at γ = 0."""

from __future__ import annotations

import pytest
import torch
from vllm_cases import COMPOSITES, ENGINE_OPTIONS, MAX_NEW, PROMPTS

from cos import SamplingParams
from cos.vllm_backend import VllmEngine

# batch 1: γ = 3; 2-4: 1; 5-7: no speculation at all; 8 and more: 2. The prompts below finish at different
# lengths, so one generate call walks the batch size down through every row.
TABLE = [(1, 1, 3), (2, 4, 1), (5, 7, 0), (8, 256, 2)]


@pytest.fixture(scope="module")
def by_batch(composite_dirs):
    engines = {name: VllmEngine(composite_dirs[name], speculative_draft=COMPOSITES[name][3],
                                num_speculative_tokens=3, speculative_by_batch=TABLE, **ENGINE_OPTIONS)
               for name in ("we2", "cd2")}
    yield engines
    for engine in engines.values():
        engine.close()


@pytest.mark.parametrize("name", ["we2", "cd2"])
def test_greedy_equals_standard_as_the_batch_shrinks(name, by_batch, engines):
    from vllm import SamplingParams as VllmSamplingParams

    standard = engines(name).generate(PROMPTS, max_new_tokens=MAX_NEW, temperature=0, eos_token_ids=[])
    engine = by_batch[name]
    lengths = [MAX_NEW - 2 * i for i in range(len(PROMPTS))]  # 24, 22, ..., 6: the batch shrinks by one
    requests = [{"prompt_token_ids": engine.encode(p)} for p in PROMPTS]
    params = [VllmSamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in lengths]
    outs = engine.llm.generate(requests, params, use_tqdm=False)
    for out, want, n in zip(outs, standard, lengths):
        assert list(out.outputs[0].token_ids) == want.token_ids[:n]
    # the table is what ran: batch 1 drafts 3 per round, batch 3 one, batch 6 none
    for batch, gamma in [(1, 3), (3, 1), (6, 0)]:
        outs = engine.generate(PROMPTS[:batch], max_new_tokens=MAX_NEW, temperature=0, eos_token_ids=[])
        assert [o.token_ids for o in outs] == [s.token_ids for s in standard[:batch]]
        for o in outs:
            assert o.spec["draft_tokens"] == gamma * o.spec["rounds"], (batch, o.spec)


def test_a_bad_table_is_refused_before_vllm_starts(composite_dirs):
    for table, why in [([(2, 8, 3)], "start at 1"), ([(1, 4, 3), (3, 8, 1)], "overlap"),
                       ([(1, 8, -1)], ">= 0"), ([(1, 8)], "(first, last, γ)")]:
        with pytest.raises(ValueError, match="speculative_by_batch"):
            VllmEngine(composite_dirs["we2"], speculative_draft="m1", num_speculative_tokens=3,
                       speculative_by_batch=table, **ENGINE_OPTIONS)
    with pytest.raises(ValueError, match="speculative_draft"):
        VllmEngine(composite_dirs["we2"], speculative_by_batch=TABLE, **ENGINE_OPTIONS)


def _core(engine: VllmEngine):
    return engine.llm.llm_engine.engine_core.engine_core  # in-process (VLLM_ENABLE_V1_MULTIPROCESSING=0)


def test_the_drafting_member_is_the_composites_own(by_batch, engines):
    """Its weights are the composite's member module, its KV cache the member's: the speculative engine
    holds as many KV blocks as the standard one in the same memory (vLLM's own draft model held a second
    cache), and its drafter's attention layers are the member's."""
    from cos.vllm_backend.member_draft import MemberDraftProposer  # here: the main venv collects without vLLM

    engine = by_batch["we2"]
    runner = _core(engine).model_executor.driver_worker.worker.model_runner
    assert isinstance(runner.drafter, MemberDraftProposer) and runner.drafter.member == "m1"
    assert runner.drafter.model is runner.model.members["m1"]
    assert runner.drafter._draft_attn_layer_names and all(
        name.startswith("members.m1.") for name in runner.drafter._draft_attn_layer_names)
    standard = _core(engines("we2")).scheduler.kv_cache_config
    assert _core(engine).scheduler.kv_cache_config.num_blocks == standard.num_blocks


def test_a_step_that_drafts_nothing_runs_no_drafter(by_batch, monkeypatch):
    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer

    forwards = []
    stock = SpecDecodeBaseProposer.propose
    def counted(self, k, *args, **kwargs):
        forwards.append(k)
        return stock(self, k, *args, **kwargs)

    monkeypatch.setattr(SpecDecodeBaseProposer, "propose", counted)
    engine = by_batch["we2"]
    engine.generate(PROMPTS[:6], max_new_tokens=8, temperature=0, eos_token_ids=[])  # batch 6: γ = 0
    assert forwards == []
    engine.generate(PROMPTS[:1], max_new_tokens=8, temperature=0, eos_token_ids=[])  # batch 1: γ = 3
    assert forwards and set(forwards) <= {3, 2}  # 2: the first of the 3 drafts is a withheld token (alternate.py)


def test_sampled_drafts_come_from_the_members_cos_distribution(by_batch, monkeypatch):
    """q handed to the rejection sampler = the member's CoS-processed distribution of each request
    (temperature, then top-k, then top-p on the member's own logits), not vLLM's softmax of raw logits."""
    from cos.sampling import to_probs
    from cos.vllm_backend.member_draft import MemberDraftProposer

    seen = []
    stock = MemberDraftProposer._sample_from_logits

    def recorded(self, logits, metadata):
        tokens, probs = stock(self, logits, metadata)
        seen.append((logits.clone(), tokens, probs))
        return tokens, probs

    monkeypatch.setattr(MemberDraftProposer, "_sample_from_logits", recorded)
    params = SamplingParams(temperature=0.7, top_k=3, top_p=0.9)
    by_batch["we2"].generate(PROMPTS[:1], max_new_tokens=12, temperature=params.temperature, top_k=params.top_k,
                             top_p=params.top_p, seed=3, eos_token_ids=[])
    assert seen
    for logits, tokens, probs in seen:
        assert probs is not None and torch.allclose(probs.float(), to_probs(logits, params), atol=1e-6)
        assert bool((probs.gather(-1, tokens.view(-1, 1)) > 0).all())  # every draft inside q's support


def test_a_step_that_drafts_nothing_samples_as_the_standard_engine(by_batch, engines, monkeypatch):
    """At batch 6 the table drafts 0: every step goes to vLLM's standard sampler, not the rejection sampler
    and its [batch, vocabulary] noise (patches.py, `_skip_empty_drafts`), and seeded sampled outputs equal the standard
    engine's draw for draw."""
    from vllm.v1.sample.rejection_sampler import RejectionSampler

    calls = []
    stock = RejectionSampler.forward

    def counted(self, *args, **kwargs):
        calls.append(1)
        return stock(self, *args, **kwargs)

    monkeypatch.setattr(RejectionSampler, "forward", counted)
    kw = dict(max_new_tokens=12, temperature=0.8, top_p=0.9, seed=5, eos_token_ids=[])
    want = engines("we2").generate(PROMPTS[:6], **kw)
    got = by_batch["we2"].generate(PROMPTS[:6], **kw)
    assert [g.token_ids for g in got] == [w.token_ids for w in want]
    assert calls == []
    by_batch["we2"].generate(PROMPTS[:1], **kw)  # batch 1 drafts 3: the rejection sampler verifies
    assert calls
