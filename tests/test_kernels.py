"""The bf16 linear kernel (cos.kernels; the AVX-512 or the AVX2 build, whichever this CPU runs): rows
rounded independently of M, close to torch, and the per-model install on a tiny bf16 Llama. Skips (with the reason) where the kernel can't run."""

from __future__ import annotations

import pytest
from conftest import bits
import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

from cos import kernels
from cos.kernels import row_linear, install_fast_linears, installed_count, uninstall_fast_linears


@pytest.fixture(params=[False, True], ids=["split", "native"])
def native(request) -> bool:
    """Both inner products: the split fp32 FMAs (every AVX-512 CPU) and vdpbf16ps (avx512_bf16 only)."""
    from cos.kernels import build

    if request.param and not build.cpu_has_native_bf16():
        pytest.skip("this CPU lacks avx512_bf16: the native path can't run here")
    return request.param


def operands(m: int, k: int, n: int, seed: int = 0, bias: bool = True):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=gen).bfloat16()
    w = (torch.randn(n, k, generator=gen) / k ** 0.5).bfloat16()
    b = torch.randn(n, generator=gen).bfloat16() if bias else None
    return x, w, b


SHAPES = [(1, 1), (15, 7), (16, 8), (17, 33), (64, 100), (100, 77), (1536, 50), (300, 259)]  # (K, N)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("k,n", SHAPES)
def test_rows_bitwise_independent_of_block_size(ext, native, k, n, threads):
    """Row i of the M-row product is bitwise the product of row i alone, for M = 1..16."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        x, w, b = operands(16, k, n, seed=k * 1000 + n)
        alone = torch.cat([ext.bf16_linear(x[i:i + 1].contiguous(), w, b, native) for i in range(16)])
        for m in list(range(1, 10)) + [12, 16]:
            for start in (0, 16 - m):
                block = ext.bf16_linear(x[start:start + m].contiguous(), w, b, native)
                assert torch.equal(bits(block), bits(alone[start:start + m])), (m, start)
    finally:
        torch.set_num_threads(before)


def assert_close_to_float(y: torch.Tensor, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> None:
    """y within bf16 rounding (plus fp32 summation order) of the fp32 product."""
    ref = x.float() @ w.float().T + (0 if b is None else b.float())
    scale = x.float().abs() @ w.float().abs().T + (0 if b is None else b.float().abs())  # cancellation bound
    err = (y.float() - ref).abs()
    assert y.dtype == torch.bfloat16 and y.shape == ref.shape
    assert bool((err <= 1e-2 * ref.abs() + 1e-4 * scale + 1e-6).all()), float(err.max())


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("k,n", SHAPES)
def test_matches_float_product(ext, native, k, n, bias):
    for m in range(1, 10):
        x, w, b = operands(m, k, n, seed=m, bias=bias)
        assert_close_to_float(ext.bf16_linear(x, w, b, native), x, w, b)


def test_rounding_matches_torch_bf16_cast(ext, native):
    """With K = 1 the product is exact in fp32, so the kernel's rounding must equal torch's RNE cast."""
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(5, 1, generator=gen).bfloat16()
    w = torch.randn(4000, 1, generator=gen).bfloat16()
    ref = (x.float() @ w.float().T).bfloat16()
    assert torch.equal(bits(ext.bf16_linear(x, w, None, native)), bits(ref))


def test_wrapper_shapes_and_non_contiguous_input(ext):
    x, w, b = operands(12, 96, 40, seed=5)
    x3 = x.reshape(3, 4, 96)
    y3 = row_linear(x3, w, b)
    assert y3.shape == (3, 4, 40)
    native = kernels.build.native_bf16()
    assert torch.equal(bits(y3.reshape(12, 40)), bits(ext.bf16_linear(x, w, b, native)))
    wide = torch.randn(96, 24).bfloat16()
    strided = wide.T  # [24, 96], not contiguous
    assert not strided.is_contiguous()
    assert torch.equal(bits(row_linear(strided, w, b)), bits(ext.bf16_linear(strided.contiguous(), w, b, native)))
    assert_close_to_float(row_linear(x[:, ::2], w[:, :48].contiguous(), b), x[:, ::2], w[:, :48], b)


def test_wrapper_falls_back_to_torch(ext):
    x, w, b = operands(kernels.MAX_ROWS + 1, 32, 8)
    if kernels.build.variant() == "avx2":  # bf16 prefills go through the kernel there (linear.max_rows)
        assert torch.equal(bits(row_linear(x, w, b)), bits(ext.bf16_linear(x, w, b, False)))
        xf, wf, bf = x.float(), w.float(), b.float()
        assert torch.equal(row_linear(xf, wf, bf), F.linear(xf, wf, bf))  # fp32: torch's sgemm past MAX_ROWS
        xl = operands(kernels.linear.WIDEN_ROWS + 1, 32, 8)[0]  # a long prefill: fp32 GEMM, widened
        assert torch.equal(bits(row_linear(xl, w, b)), bits(F.linear(xl.float(), wf, bf).bfloat16()))
    else:
        assert torch.equal(bits(row_linear(x, w, b)), bits(F.linear(x, w, b)))  # too many rows
    xh, wh = x.half()[:2], w.half()
    assert torch.equal(row_linear(xh, wh), F.linear(xh, wh))  # fp16
    with pytest.raises(RuntimeError, match="same dtype"):  # mixed dtypes: torch's path, and torch's error
        row_linear(x.float()[:2], w)
    wg = w.clone().requires_grad_()
    y = row_linear(x[:2], wg, b)  # a gradient is wanted: torch's path, which records it
    assert y.requires_grad and y.grad_fn is not None


def tiny_bf16_llama() -> LlamaForCausalLM:
    config = LlamaConfig(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         tie_word_embeddings=False)
    torch.manual_seed(0)
    return LlamaForCausalLM(config).to(torch.bfloat16).eval()


def test_install_on_tiny_llama(ext):
    model = tiny_bf16_llama()
    ids = torch.randint(0, 1000, (1, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        stock = model(ids).logits.float()
        linears = sum(isinstance(m, torch.nn.Linear) for m in model.modules())
        assert linears == 2 * 7 + 1
        assert install_fast_linears(model) == linears
        assert install_fast_linears(model) == 0  # already installed
        assert installed_count(model) == linears
        fast = model(ids).logits.float()
        assert (fast - stock).abs().max() <= 0.05 * stock.abs().max()
        assert uninstall_fast_linears(model) == linears
        assert installed_count(model) == 0
        assert "forward" not in model.model.layers[0].mlp.down_proj.__dict__
        assert torch.equal(model(ids).logits.float(), stock)


def test_install_leaves_fp16_models_and_other_models_alone(ext):
    fp16 = tiny_bf16_llama().half()
    assert install_fast_linears(fp16) == 0
    bf16 = tiny_bf16_llama()
    other = tiny_bf16_llama()
    class_forward, functional = torch.nn.Linear.forward, F.linear
    assert install_fast_linears(bf16) > 0
    assert installed_count(other) == 0
    assert torch.nn.Linear.forward is class_forward and F.linear is functional  # nothing global
    uninstall_fast_linears(bf16)


def test_unavailable_kernel_leaves_models_on_torch(monkeypatch):
    """Where the kernel can't run (no AVX-512, no compiler), install changes nothing and calls use torch."""
    from cos.kernels import build

    monkeypatch.setattr(build, "load", lambda: None)
    model = tiny_bf16_llama()
    assert install_fast_linears(model) == 0 and installed_count(model) == 0
    x, w, b = operands(3, 32, 8)
    assert torch.equal(bits(row_linear(x, w, b)), bits(F.linear(x, w, b)))


def test_cpu_check_picks_the_build_and_names_missing_flags(monkeypatch):
    """AVX-512 F/BW/VL -> the AVX-512 build; else AVX2 + FMA -> the AVX2 build; else none, naming what lacks."""
    from cos.kernels import build

    for flags, expected in [({"avx512f", "avx512bw", "avx512vl", "avx2", "fma"}, "avx512"),
                            ({"avx2", "fma", "avx512f"}, "avx2"), ({"avx2", "fma"}, "avx2")]:
        monkeypatch.setattr(build, "cpu_flags", lambda flags=flags: flags)
        assert build.cpu_variant()[0] == expected and build.cpu_supported()[0]
    monkeypatch.setattr(build, "cpu_flags", lambda: {"avx2", "avx512f"})
    variant, why = build.cpu_variant()
    assert variant is None and "avx512bw" in why and "fma" in why and not build.cpu_supported()[0]


def test_each_build_is_one_translation_unit_with_the_same_functions():
    """Both builds define the three functions bindings.cpp exports, from their own ISA's sources."""
    from cos.kernels import build

    for variant in build.VARIANTS:
        source = build.source_of(variant)
        for function in ("torch::Tensor bf16_linear(", "torch::Tensor f32_linear(", "torch::Tensor row_attention("):
            assert source.count(function) == 1, (variant, function)
        assert ("_mm512_" in source) == (variant == "avx512")


def test_bf16_prefills_take_the_kernel_only_on_the_avx2_build(monkeypatch):
    """Past MAX_ROWS torch's GEMM is faster, except bf16 without native bf16 (the AVX2 build's CPUs)."""
    import math

    from cos.kernels import build, linear

    monkeypatch.setattr(build, "variant", lambda: "avx2")
    assert linear.max_rows(torch.bfloat16) == math.inf and linear.max_rows(torch.float32) == kernels.MAX_ROWS
    for variant in ("avx512", None):
        monkeypatch.setattr(build, "variant", lambda variant=variant: variant)
        assert linear.max_rows(torch.bfloat16) == linear.max_rows(torch.float32) == kernels.MAX_ROWS


def test_native_path_only_where_the_cpu_has_avx512_bf16(monkeypatch):
    from cos.kernels import build

    for flags, env, expected in [({"avx512f"}, "1", False), ({"avx512f", "avx512_bf16"}, "1", True),
                                 ({"avx512f", "avx512_bf16"}, "0", False)]:
        monkeypatch.setattr(build, "_native", None)
        monkeypatch.setattr(build, "cpu_flags", lambda flags=flags: flags)
        monkeypatch.setenv("COS_KERNELS_NATIVE", env)
        assert build.native_bf16() is expected


def test_thread_count_does_not_change_results(ext, native):
    """cos.threads switches the intra-op thread count between calls: results must not move with it."""
    x, w, b = operands(6, 200, 300, seed=9)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = ext.bf16_linear(x, w, b, native)
        torch.set_num_threads(2)
        two = ext.bf16_linear(x, w, b, native)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(bits(one), bits(two))
