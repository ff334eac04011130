"""The memory a VllmEngine reserves when the caller says nothing (cos/vllm_backend/memory.py): sized from
the members, so the runner's two engines (the method and compare_with) fit on one machine. No vLLM needed."""

from __future__ import annotations

import pytest
from transformers import Qwen2Config

from cos.vllm_backend import memory
from cos.vllm_backend.memory import cpu_kv_cache_bytes, kv_bytes_per_token, share_gpu, size_cpu_kv_cache

GiB = 1 << 30
# the packaged pair's shapes (Qwen2.5-Coder-1.5B and 0.5B): 28 layers x 2 KV heads x 128, 24 x 2 x 64
BIG = Qwen2Config(num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2, hidden_size=1536,
                  max_position_embeddings=32768)
SMALL = Qwen2Config(num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2, hidden_size=896,
                    max_position_embeddings=32768)


def test_bytes_per_token_count_keys_and_values_of_every_layer():
    assert kv_bytes_per_token([BIG], 2) == 2 * 28 * 2 * 128 * 2 == 28672
    assert kv_bytes_per_token([BIG, SMALL], 2) == 28672 + 2 * 24 * 2 * 64 * 2


def test_cpu_cache_holds_four_sequences_within_an_eighth_of_the_ram():
    per_token = kv_bytes_per_token([BIG, SMALL], 2)
    sequence = per_token * 32768
    assert cpu_kv_cache_bytes([BIG, SMALL], 32768, 2, 64 * GiB) == 4 * sequence  # room for all four
    assert cpu_kv_cache_bytes([BIG, SMALL], 32768, 2, 24 * GiB) == 3 * GiB  # the cap: two engines fit
    assert cpu_kv_cache_bytes([BIG, SMALL], 32768, 2, 4 * GiB) == sequence  # never less than vLLM's one sequence


def test_two_engines_of_the_packaged_pair_fit_a_24_gib_machine():
    """The failure this replaces: vLLM's default gave the first engine ~17 GiB and the second could not start."""
    weights = (1.54e9 + 0.49e9) * 2  # bf16 parameters of the pair
    engines = 2 * (cpu_kv_cache_bytes([BIG, SMALL], 32768, 2, 24 * GiB) + weights)
    assert engines < 0.6 * 24 * GiB


def test_options_are_sized_from_max_model_len_and_dtype(monkeypatch):
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    options = {"max_model_len": 256, "dtype": "float32"}
    size_cpu_kv_cache(options, [BIG, SMALL])
    assert options["kv_cache_memory_bytes"] == 4 * kv_bytes_per_token([BIG, SMALL], 4) * 256
    options = {}
    size_cpu_kv_cache(options, [BIG])  # max_model_len: the members' own; dtype: the config's (bf16 default)
    assert options["kv_cache_memory_bytes"] >= kv_bytes_per_token([BIG], 2) * 32768


@pytest.mark.parametrize("chosen", [{"kv_cache_memory_bytes": 123}, {"gpu_memory_utilization": 0.5}])
def test_an_explicit_choice_wins(chosen, monkeypatch):
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    options = dict(chosen)
    size_cpu_kv_cache(options, [BIG])
    share_gpu(options, engines=2)
    assert options == chosen


def test_vllm_cpu_kvcache_space_wins_on_cpu(monkeypatch):
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "2")
    options = {}
    size_cpu_kv_cache(options, [BIG])
    assert options == {}


def test_engines_share_a_gpu(monkeypatch):
    monkeypatch.setattr(memory.torch.cuda, "is_available", lambda: True)
    one, two = {}, {}
    share_gpu(one, engines=1)
    share_gpu(two, engines=2)
    assert one == {} and two == {"gpu_memory_utilization": memory.GPU_SHARE / 2}
