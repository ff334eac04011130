"""How much memory a VllmEngine reserves when the caller says nothing: sized from the members, not the machine.

vLLM's default takes a share of the whole device for one engine (`gpu_memory_utilization` 0.92; on CPU
the same share of the RAM, as KV cache). A run that needs two engines (the runner's method and its
`compare_with` standard method) then fails to start the second: on a 24 GiB CPU machine the first
reserved ~17 GiB and the second died with "Available memory on node 0 (1.84/23.59 GiB) on startup is less
than desired CPU memory utilization". So, unless the caller chose (`kv_cache_memory_bytes`,
`gpu_memory_utilization`, or `VLLM_CPU_KVCACHE_SPACE` on CPU):
- on CPU, the KV cache holds SEQUENCES sequences of `max_model_len` tokens of every member (the
  composite's members and a draft model outside it), capped at a SHARE of the RAM, never less than the one
  sequence vLLM needs to start;
- on a GPU, each of the run's `engines` takes an equal part of vLLM's usual share (vLLM checks each
  engine's share against the free memory at start, whatever the KV cache's size).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

import torch

log = logging.getLogger(__name__)

SEQUENCES = 4  # full-length sequences the CPU KV cache holds by default (more when they are short)
SHARE = 1 / 8  # at most this share of the RAM per engine's KV cache on CPU
GPU_SHARE = 0.9  # vLLM's own default share is 0.92; the run's engines split this
CHOSEN = ("kv_cache_memory_bytes", "gpu_memory_utilization")
BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2}


def kv_bytes_per_token(configs: Sequence, dtype_bytes: int) -> int:
    """Keys and values of one token in every attention layer of these (HF) configs."""
    total = 0
    for c in configs:
        heads = getattr(c, "num_key_value_heads", None) or c.num_attention_heads
        head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        total += 2 * c.num_hidden_layers * heads * head_dim * dtype_bytes
    return total


def cpu_kv_cache_bytes(configs: Sequence, max_model_len: int, dtype_bytes: int, ram_bytes: int) -> int:
    """SEQUENCES full-length sequences, at most SHARE of the RAM, at least one sequence."""
    sequence = kv_bytes_per_token(configs, dtype_bytes) * max_model_len
    return max(sequence, min(SEQUENCES * sequence, int(SHARE * ram_bytes)))


def caller_chose(options: dict, on_cpu: bool) -> bool:
    return any(options.get(k) is not None for k in CHOSEN) or (on_cpu and bool(os.environ.get("VLLM_CPU_KVCACHE_SPACE")))


def size_cpu_kv_cache(options: dict, configs: Sequence) -> None:
    """Set options["kv_cache_memory_bytes"] for a CPU engine over these member configs, unless the caller chose."""
    if caller_chose(options, on_cpu=True):
        return
    max_model_len = options.get("max_model_len") or min(getattr(c, "max_position_embeddings", 1 << 30) for c in configs)
    dtype = str(options.get("dtype") or "auto").replace("torch.", "")
    dtype_bytes = BYTES.get(dtype) or max(_config_bytes(c) for c in configs)
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    size = cpu_kv_cache_bytes(configs, max_model_len, dtype_bytes, ram)
    options["kv_cache_memory_bytes"] = size
    log.info("cos: vLLM KV cache %.2f GiB (%d tokens of max_model_len %d for %d members, at most 1/%d of the RAM); "
             "pass kv_cache_memory_bytes to choose", size / 2**30, size // kv_bytes_per_token(configs, dtype_bytes),
             max_model_len, len(configs), round(1 / SHARE))


def share_gpu(options: dict, engines: int) -> None:
    """Split the GPU between the `engines` a run starts (gpu_memory_utilization), unless the caller chose."""
    if engines > 1 and torch.cuda.is_available() and not caller_chose(options, on_cpu=False):
        options["gpu_memory_utilization"] = GPU_SHARE / engines


def _config_bytes(config) -> int:
    dtype = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None) or "bfloat16"
    return BYTES.get(str(dtype).replace("torch.", ""), 2)
