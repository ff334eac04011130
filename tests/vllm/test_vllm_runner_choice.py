"""The model runner a composite runs on: the V1 runner the CoS hooks are written for, chosen by the plugin
under vLLM's own selection logic, and one clear error where a step runs anywhere else (patches.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest
from vllm_cases import ENGINE_OPTIONS

from cos.vllm_backend import patches
from cos.vllm_backend.composite import ARCHITECTURE
from cos.vllm_backend.patches import UnsupportedVllm, check_runner, runner_for_composite


def config(architecture: str) -> SimpleNamespace:
    """What VllmConfig.use_v2_model_runner reads of a config (vLLM's own rule, then ours)."""
    return SimpleNamespace(model_config=SimpleNamespace(hf_config=SimpleNamespace(architectures=[architecture])),
                           attention_config=SimpleNamespace(hisparse_config=None), watermark_config=None,
                           _get_v2_model_runner_unsupported_features=lambda: [])


@pytest.fixture
def triton_present(monkeypatch):
    """vLLM's selection as on a GPU machine (vllm 0.33: MRV2 is the default wherever Triton is present)."""
    from vllm import envs
    from vllm.config import vllm as vllm_config_module

    monkeypatch.setattr(vllm_config_module, "HAS_TRITON", True)
    monkeypatch.delenv(patches.V2_SWITCH, raising=False)
    cached = envs._is_envs_cache_enabled()  # an engine started earlier in this process froze vllm.envs
    envs.disable_envs_cache()  # read VLLM_USE_V2_MODEL_RUNNER as each test sets it
    yield
    if cached:
        envs.enable_envs_cache()


def test_a_composite_gets_the_v1_runner_where_vllm_would_pick_v2(triton_present):
    from vllm.config import VllmConfig

    patches.install()
    use_v2 = VllmConfig.use_v2_model_runner.fget
    assert use_v2(config("LlamaForCausalLM")) is True  # the control: vLLM's own choice for any other model
    assert use_v2(config(ARCHITECTURE)) is False


def test_asking_for_v2_with_a_composite_is_refused_with_the_fix(triton_present, monkeypatch):
    from vllm.config import VllmConfig

    patches.install()
    monkeypatch.setenv(patches.V2_SWITCH, "1")
    assert VllmConfig.use_v2_model_runner.fget(config("LlamaForCausalLM")) is True
    with pytest.raises(ValueError, match="unset VLLM_USE_V2_MODEL_RUNNER or set it to 0"):
        VllmConfig.use_v2_model_runner.fget(config(ARCHITECTURE))
    monkeypatch.setenv(patches.V2_SWITCH, "0")
    assert VllmConfig.use_v2_model_runner.fget(config(ARCHITECTURE)) is False
    assert runner_for_composite(None) is False and runner_for_composite(False) is False


def test_the_patched_v1_runner_passes_the_check():
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner

    from cos.vllm_backend.member_draft import MemberDraftProposer

    patches.install()
    runner = object.__new__(CPUModelRunner)
    runner.input_batch, runner.requests = None, {}
    runner.drafter = object.__new__(MemberDraftProposer)
    check_runner(runner, member_drafts=True)
    runner.drafter = object()  # vLLM's stock drafter: the member would be loaded twice
    with pytest.raises(UnsupportedVllm, match="not MemberDraftProposer"):
        check_runner(runner, member_drafts=True)


def test_another_runner_is_named_with_what_it_bypasses():
    GPUModelRunner = type("GPUModelRunner", (), {"__module__": "vllm.v1.worker.gpu.model_runner",  # noqa: N806
                                                 "sample": lambda self: None})
    with pytest.raises(UnsupportedVllm) as error:
        check_runner(GPUModelRunner(), member_drafts=True)
    message = str(error.value)
    for part in ("vllm.v1.worker.gpu.model_runner.GPUModelRunner", "_sample is not CoS's", "MemberDraftProposer",
                 "per-request CoS parameters", "VLLM_USE_V2_MODEL_RUNNER"):
        assert part in message, (part, message)


def test_a_bypassed_hook_stops_the_engine_with_the_error(composite_dirs):
    """vLLM's stock _sample put back (as a runner the plugin does not patch would have it): the first step
    raises the error instead of decoding without the CoS hooks. In a process of its own: a failed engine
    start leaves vLLM's process-wide state behind."""
    script = textwrap.dedent(f"""
        import inspect
        from cos.vllm_backend import VllmEngine, patches, plugin
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner
        plugin.register()
        GPUModelRunner._sample = inspect.unwrap(GPUModelRunner._sample)
        patches.wrap_sample = lambda: None  # vLLM registers the plugin again: as if its runner were out of reach
        engine = VllmEngine({str(composite_dirs["we2"])!r}, speculative_draft="m1", num_speculative_tokens=2,
                            **{ENGINE_OPTIONS!r})
        engine.generate(["Hello"], max_new_tokens=4, temperature=0)
        print("DECODED WITHOUT THE HOOKS")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert "DECODED WITHOUT THE HOOKS" not in done.stdout
    assert done.returncode != 0
    assert "bypasses" in done.stderr and "_sample is not CoS's" in done.stderr, done.stderr[-3000:]
