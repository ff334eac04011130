"""Bitwise rows (kernels/invariance.py): a position's logits are the same bits whether it is computed
in a one-token step, in a verify block of up to 16 rows, or in any split of a sequence into catch-up
blocks (with rollbacks between), in bf16 and fp32, on Llama and Qwen2 members. Op by op first (the
kernels, then each torch op of a decoder layer), then whole members, tiny and (real_model) the
packaged Qwen 0.5B, then greedy CoS against greedy standard decoding in bf16 with no near-tie allowance.
"""

from __future__ import annotations

import logging
import random

import pytest
from conftest import bits
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM
from transformers.models.llama.modeling_llama import LlamaMLP, LlamaRMSNorm, LlamaRotaryEmbedding, apply_rotary_pos_emb

from cos import Engine, make_combination, make_plan
from cos.kernels import install_row_kernels, row_invariance
from cos.member import Member
from cos.models.packaged import packaged_model_dir

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def assert_rows_alone(fn, x: torch.Tensor, dim: int = -2) -> None:
    """fn over a block of rows along `dim` equals fn over each row alone, bitwise, for blocks of 1..16."""
    alone = torch.cat([fn(x.narrow(dim, i, 1)) for i in range(x.shape[dim])], dim=dim)
    for m in range(1, x.shape[dim] + 1):
        block = fn(x.narrow(dim, 0, m))
        assert torch.equal(bits(block), bits(alone.narrow(dim, 0, m))), f"rows of a {m}-row block differ"


# ---------------------------------------------------------------- the kernels
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("k,n", [(1, 1), (15, 7), (17, 33), (896, 100), (100, 77)])
def test_f32_linear_rows_independent_of_block_and_threads(ext, k, n, threads):
    gen = torch.Generator().manual_seed(k + n)
    x, w, b = torch.randn(16, k, generator=gen), torch.randn(n, k, generator=gen) / k ** 0.5, torch.randn(n, generator=gen)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        assert_rows_alone(lambda rows: ext.f32_linear(rows.contiguous(), w, b), x, dim=0)
    finally:
        torch.set_num_threads(before)
    ref = x.double() @ w.double().T + b.double()
    assert torch.allclose(ext.f32_linear(x, w, b).double(), ref, atol=1e-5 * k ** 0.5)


def reference_attention(q, k, v, scaling, allowed):
    """softmax(q k^T scaling) v in float64 over the allowed keys; [B, M, Hq, D]."""
    group = q.shape[1] // k.shape[1]
    k, v = k.double().repeat_interleave(group, 1), v.double().repeat_interleave(group, 1)
    s = (q.double() @ k.transpose(-1, -2) * scaling).masked_fill(~allowed[:, None], float("-inf"))
    return (s.softmax(-1) @ v).transpose(1, 2)


def causal(m: int, t: int) -> torch.Tensor:
    return torch.ones(m, t, dtype=torch.bool).tril(t - m)[None]  # [1, M, T]: the block is the last M positions


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("head_dim", [8, 24, 64, 128])
def test_row_attention_close_to_softmax_attention(ext, dtype, head_dim):
    gen = torch.Generator().manual_seed(head_dim)
    q = torch.randn(1, 6, 16, head_dim, generator=gen).to(dtype)
    k, v = (torch.randn(1, 2, 70, head_dim, generator=gen).to(dtype) for _ in range(2))
    out = ext.row_attention(q, k, v, None, head_dim ** -0.5)
    ref = reference_attention(q, k, v, head_dim ** -0.5, causal(16, 70))
    assert out.shape == (1, 16, 6, head_dim) and out.dtype == dtype
    assert (out.double() - ref).abs().max() < (1e-2 if dtype == torch.bfloat16 else 1e-5)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_row_attention_rows_independent_of_block_and_threads(ext, dtype, threads):
    """Row m of an M-row block over T keys is row m alone over its own T - M + m + 1 keys."""
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(1, 14, 16, 64, generator=gen).to(dtype)
    k, v = (torch.randn(1, 2, 90, 64, generator=gen).to(dtype) for _ in range(2))
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for m in range(1, 17):
            block = ext.row_attention(q[:, :, 16 - m:], k[:, :, : 90 - 16 + m], v[:, :, : 90 - 16 + m], None, 0.125)
            for i in range(m):
                keys = 90 - m + i + 1 - (16 - m)
                alone = ext.row_attention(q[:, :, 16 - m + i : 17 - m + i], k[:, :, :keys], v[:, :, :keys], None, 0.125)
                assert torch.equal(bits(block[:, i]), bits(alone[:, 0])), (m, i)
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_row_attention_mask_sees_keys_not_their_places(ext, dtype):
    """A causal mask gives what the mask-free causal path gives; a row whose allowed keys are scattered
    (a draft tree's node and its ancestors) gets the bits of the same keys laid out as a chain; a fully
    masked row is zeros."""
    gen = torch.Generator().manual_seed(5)
    q = torch.randn(1, 4, 6, 32, generator=gen).to(dtype)
    k, v = (torch.randn(1, 2, 40, 32, generator=gen).to(dtype) for _ in range(2))
    plain = ext.row_attention(q, k, v, None, 0.2)
    assert torch.equal(bits(ext.row_attention(q, k, v, causal(6, 40), 0.2)), bits(plain))
    tree = causal(6, 40).clone()
    tree[0, 5, [35, 37, 38]] = False  # the last query sees the prefix 0..34 and the keys 36, 39
    chain = [*range(35), 36, 39]
    tree_out = ext.row_attention(q, k, v, tree, 0.2)[:, 5]
    chain_out = ext.row_attention(q[:, :, 5:], k[:, :, chain], v[:, :, chain], None, 0.2)[:, 0]
    assert torch.equal(bits(tree_out), bits(chain_out))
    ref = reference_attention(q[:, :, 5:], k, v, 0.2, tree[:, 5:])[:, 0]
    assert (tree_out.double() - ref).abs().max() < (1e-2 if dtype == torch.bfloat16 else 1e-5)
    none = torch.zeros(1, 6, 40, dtype=torch.bool)
    assert not ext.row_attention(q, k, v, none, 0.2).any()


# ---------------------------------------------------------------- the other ops of a decoder layer
@pytest.fixture(params=[1, 2], ids=["1-thread", "2-threads"])
def threads(request):
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(before)


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("hidden", [32, 100, 576, 896, 1536, 4096])
def test_rms_norm_rows(dtype, hidden, threads):
    norm = LlamaRMSNorm(hidden).to(dtype)  # Qwen2RMSNorm is the same code
    with torch.no_grad():
        norm.weight.normal_()
    x = torch.randn(1, 16, hidden, generator=torch.Generator().manual_seed(hidden)).to(dtype)
    with torch.inference_mode():
        assert_rows_alone(norm, x)


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("intermediate", [128, 256, 1536, 4864, 8960, 11008])
def test_mlp_activation_rows(dtype, intermediate, threads):
    """SiLU(gate) * up, the residual add, on rows of a multiple of 128 elements (`row_invariance` refuses
    other sizes; the MLP's Linear layers are the kernel's)."""
    mlp = LlamaMLP(LlamaConfig(hidden_size=32, num_attention_heads=4, intermediate_size=intermediate, hidden_act="silu"))
    gen = torch.Generator().manual_seed(intermediate)
    both = torch.randn(1, 16, 2 * intermediate, generator=gen).to(dtype)  # gate | up, as two Linear outputs
    halves = lambda x: (x[..., :intermediate].contiguous(), x[..., intermediate:].contiguous())  # noqa: E731
    with torch.inference_mode():
        assert_rows_alone(lambda x: mlp.act_fn(halves(x)[0]) * halves(x)[1] + halves(x)[0], both)


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("head_dim", [32, 64, 128])
def test_rotary_rows(dtype, head_dim, threads):
    """cos/sin of a block of positions, and their application to q and k, row by row."""
    config = LlamaConfig(hidden_size=4 * head_dim, num_attention_heads=4, max_position_embeddings=4096)
    rotary = LlamaRotaryEmbedding(config)
    positions = torch.arange(1000, 1016)[None]
    q = torch.randn(1, 4, 16, head_dim, generator=torch.Generator().manual_seed(head_dim)).to(dtype)
    with torch.inference_mode():
        alone = torch.cat([torch.stack(rotary(q, positions[:, i : i + 1])) for i in range(16)], dim=-2)
        for m in range(1, 17):  # cos and sin [2, 1, m, D]
            assert torch.equal(bits(torch.stack(rotary(q, positions[:, :m]))), bits(alone[:, :, :m]))

        alone = torch.cat([apply_rotary_pos_emb(q[:, :, i : i + 1], q[:, :, i : i + 1],
                                                *rotary(q, positions[:, i : i + 1]))[0] for i in range(16)], dim=2)
        for m in range(1, 17):
            block = apply_rotary_pos_emb(q[:, :, :m], q[:, :, :m], *rotary(q, positions[:, :m]))[0]
            assert torch.equal(bits(block), bits(alone[:, :, :m]))


# ---------------------------------------------------------------- whole members
def tiny(model_type: str, dtype: torch.dtype, **sizes):
    common = dict(vocab_size=300, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=512, initializer_range=0.2, tie_word_embeddings=False)
    common.update(sizes)
    torch.manual_seed(0)
    model = (LlamaForCausalLM(LlamaConfig(**common)) if model_type == "llama"
             else Qwen2ForCausalLM(Qwen2Config(**common))).to(dtype).eval()
    install_row_kernels(model)
    return model


def one_token_steps(member: Member, seq: torch.Tensor, first: int) -> dict[int, torch.Tensor]:
    """Logits after seq[:L] for L = first .. len(seq), each from a one-token step."""
    member.prefill(seq[:first])
    return {length: member.score(seq[:length], 1)[0] for length in range(first, seq.shape[0] + 1)}


def assert_blocks_and_splits_match_steps(member: Member, seq: torch.Tensor, first: int, seed: int) -> None:
    steps = one_token_steps(member, seq, first)
    end = seq.shape[0]
    for k in range(1, 17):  # a verify block of k rows after the same cache of end - k positions
        member.rollback(end - k)
        block = member.score(seq, k)
        for j in range(k):
            assert torch.equal(bits(block[j]), bits(steps[end - k + 1 + j])), f"block of {k}: row {j} differs"
    rng = random.Random(seed)  # catch-up blocks of 1..20 tokens (past 16: fed in pieces), rollbacks between
    for _ in range(3):
        member.prefill(seq[:first])
        length = first
        while length < end:
            if rng.random() < 0.3 and length - first > 2:  # a rejection: roll back, then redo
                length -= rng.randint(1, 2)
                member.rollback(length - 1)
            fed = min(rng.randint(1, 20), end - length)
            want = rng.randint(1, fed)
            rows = member.score(seq[: length + fed], want)
            for j in range(want):
                position = length + fed - want + 1 + j
                assert torch.equal(bits(rows[j]), bits(steps[position])), f"catch-up of {fed}: row {j} differs"
            length += fed


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("model_type", ["llama", "qwen2"])
def test_tiny_member_rows_match_one_token_steps(ext, model_type, dtype):
    model = tiny(model_type, dtype)
    assert row_invariance(model) is None
    seq = torch.randint(0, 300, (72,), generator=torch.Generator().manual_seed(1))
    for cache in ("preallocated", "dynamic"):
        assert_blocks_and_splits_match_steps(Member(model, cache=cache), seq, first=30, seed=2)


def test_reasons_when_rows_are_not_invariant(ext, caplog):
    model = tiny("llama", torch.bfloat16)
    assert row_invariance(tiny("llama", torch.float16)).startswith("float16 weights")
    from cos.kernels import uninstall_fast_linears, uninstall_row_attention

    plain = tiny("qwen2", torch.bfloat16)
    uninstall_fast_linears(plain)
    uninstall_row_attention(plain)
    assert row_invariance(plain).startswith("kernels=false")
    assert Member(model, compile=True, cache="static").row_invariance.startswith("compiled")
    odd = tiny("llama", torch.bfloat16, intermediate_size=160)
    assert row_invariance(odd).startswith("intermediate size 160")
    plan = make_plan("cd_chef", 2, make_combination("cd", 2), [1, 3])
    with caplog.at_level(logging.WARNING, logger="cos.engine"):
        assert Engine([Member(model, name="a"), Member(model, name="b")], plan).row_invariance is None
        assert "not bitwise" not in caplog.text
        engine = Engine([Member(model, name="a"), Member(plain, name="b")], plan)
    assert engine.row_invariance.startswith("b: kernels=false") and "not bitwise" in caplog.text
    out = engine.generate([1, 2, 3], max_new_tokens=4, temperature=0, eos_token_ids=[])
    assert out.stats.row_invariance == engine.row_invariance


@pytest.mark.parametrize("method,gamma", [("cd_chef", [1, 5]), ("cd_sd", 4), ("we_chef", [1, 5])])
def test_greedy_bf16_equals_standard_token_for_token(ext, method, gamma):
    """No near-tie allowance: with bitwise rows, greedy CoS is greedy standard decoding in bf16."""
    expert, amateur = tiny("qwen2", torch.bfloat16), tiny("qwen2", torch.bfloat16)
    with torch.no_grad():  # a related amateur: partial acceptance
        for p in amateur.parameters():
            p.add_(0.3 * p.std() * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())).to(p.dtype))
    kind = method.split("_")[0]
    combination = make_combination(kind, 2, **({"alpha": 0.1} if kind == "cd" else {"lam": 0.5}))
    members = [Member(expert, name="expert"), Member(amateur, name="amateur")]
    fast = Engine(members, make_plan(method, 2, combination, gamma))
    slow = Engine(members, make_plan(kind, 2, combination, 1))
    accepted = 0
    for seed in range(4):
        prompt = torch.randint(0, 300, (12,), generator=torch.Generator().manual_seed(seed)).tolist()
        out = fast.generate(prompt, max_new_tokens=48, temperature=0, eos_token_ids=[])
        assert out.tokens == slow.generate(prompt, max_new_tokens=48, temperature=0, eos_token_ids=[]).tokens
        accepted += out.stats.accepted
    assert accepted > 0


# ---------------------------------------------------------------- the packaged Qwen 0.5B
@pytest.mark.real_model
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_real_qwen_rows_match_one_token_steps(ext, dtype):
    folder = packaged_model_dir("qwen2.5-coder-0.5b-instruct")
    if folder is None:
        pytest.skip("converted qwen2.5-coder-0.5b-instruct absent; run: python -m cos.models pull qwen2.5-coder-0.5b-instruct")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).eval()
    install_row_kernels(model)
    assert row_invariance(model) is None
    text = "def merge_sorted(a: list[int], b: list[int]) -> list[int]:\n    \"\"\"Merge two sorted lists.\"\"\"\n    out = []\n"
    seq = torch.tensor(AutoTokenizer.from_pretrained(folder)(text)["input_ids"])
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert_blocks_and_splits_match_steps(Member(model), seq, first=seq.shape[0] - 20, seed=3)
    finally:
        torch.set_num_threads(threads)
