"""Greedy exactness on real models from the packages: CoS and Naive-CoS equal standard decoding.

Members: a real model (fp32) and its own early exit, the same weights cut after two thirds of the
layers (DoLa's premature-layer amateur): one tokenizer, real attention and KV-cache rollback,
partial acceptance. SmolLM2-135M and Qwen2.5-Coder-0.5B run in CI (.ci/run pulls them); the
packaged 1.5B + 0.5B Qwen pair runs where it is pulled. Each accelerated method must reproduce the
naive no-cache reference (tests/greedy_check.py), and the standard method too. In bf16, with the
row-invariant kernels (cos.kernels), each accelerated method must equal its standard method exactly,
token for token with no near-tie allowance (docs/exactness.md, "Bitwise rows").

    python -m cos.models pull smollm2-135m-instruct qwen2.5-coder-0.5b-instruct
    python -m pytest -q -m real_model
"""

from __future__ import annotations

import pytest
import torch
from greedy_check import assert_same_greedy
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from cos import Engine, SamplingParams, make_combination, make_plan
from cos.kernels import install_row_kernels, row_invariance
from cos.member import Member
from cos.methods.reference import reference_generate
from cos.models.packaged import packaged_model_dir

pytestmark = [pytest.mark.real_model, pytest.mark.slow]

PROMPTS = ["def is_palindrome(s: str) -> bool:\n", "Question: Tom has 3 apples and buys 5 more. How many"]
N_NEW = 16
GREEDY = SamplingParams(temperature=0)
# (standard, accelerated, gamma, proposer, bonus); gamma in member order [full model, other]. In CD the
# full model proposes: an early-exit amateur's own argmax is almost never argmax(l_e - α l_a), so its
# drafts would all be rejected (exact, but nothing accepted to test).
METHODS = [("cd", "cd_chef", [5, 1], None, "none"), ("cd", "cd_sd", 4, 0, "none"),
           ("we", "we_chef", [1, 5], None, "none"), ("we", "we_sd", 4, 1, "exact")]


def folder(name: str) -> str:
    found = packaged_model_dir(name)
    if found is None:
        pytest.skip(f"{name} is not pulled: python -m cos.models pull {name}")
    return str(found)


def early_exit(path: str, dtype=torch.float32):
    """The model's first two thirds of layers, then its own final norm and LM head."""
    layers = 2 * AutoConfig.from_pretrained(path).num_hidden_layers // 3
    return AutoModelForCausalLM.from_pretrained(path, num_hidden_layers=layers, dtype=dtype).eval()


def full(path: str, dtype=torch.float32):
    return AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval()


PAIRS = {  # name -> () -> (model folder, other folder); the same folder twice: the other is its early exit
    "smollm2-135m+early-exit": lambda: (folder("smollm2-135m-instruct"),) * 2,
    "qwen-0.5b+early-exit": lambda: (folder("qwen2.5-coder-0.5b-instruct"),) * 2,
    "qwen-1.5b+qwen-0.5b": lambda: (folder("qwen2.5-coder-1.5b-instruct"), folder("qwen2.5-coder-0.5b-instruct")),
}


def load_pair(name: str, dtype):
    big, small = PAIRS[name]()
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # real matrices: two threads pay (conftest sets one for the tiny models)
    models = [full(big, dtype), early_exit(small, dtype) if big == small else full(small, dtype)]
    yield AutoTokenizer.from_pretrained(big), models, {}
    torch.set_num_threads(threads)


@pytest.fixture(scope="module", params=list(PAIRS))
def pair(request):
    yield from load_pair(request.param, torch.float32)


@pytest.fixture(scope="module", params=list(PAIRS))
def bf16_pair(request, ext):
    for tokenizer, models, _ in load_pair(request.param, torch.bfloat16):
        for model in models:
            install_row_kernels(model)
            assert row_invariance(model) is None, row_invariance(model)
        yield tokenizer, models


@pytest.mark.parametrize("standard,method,gamma,proposer,bonus", METHODS)
def test_accelerated_equals_standard_and_reference(pair, standard, method, gamma, proposer, bonus):
    tokenizer, models, references = pair
    combination = make_combination(standard, 2, **({"alpha": 0.1} if standard == "cd" else {"lam": 0.5}))
    members = [Member(m, name=f"m{i}") for i, m in enumerate(models)]
    fast = Engine(members, make_plan(method, 2, combination, gamma, proposer, bonus))
    slow = Engine(members, make_plan(standard, 2, combination, 1))
    drafted = accepted = 0
    for text in PROMPTS:
        ids = tokenizer(text)["input_ids"]
        key = (standard, text)
        if key not in references:
            references[key] = reference_generate(models, combination, ids, N_NEW, GREEDY)
        out = fast.generate(ids, max_new_tokens=N_NEW, temperature=0, eos_token_ids=[])
        base = slow.generate(ids, max_new_tokens=N_NEW, temperature=0, eos_token_ids=[])
        assert_same_greedy(base.tokens, references[key], ids, models, combination)
        assert_same_greedy(out.tokens, references[key], ids, models, combination)
        drafted, accepted = drafted + out.stats.drafted, accepted + out.stats.accepted
    assert drafted > 0 and 0 < accepted  # speculation really ran, and some drafts were accepted


@pytest.mark.parametrize("standard,method,gamma,proposer,bonus", METHODS)
def test_bf16_accelerated_equals_standard_token_for_token(bf16_pair, standard, method, gamma, proposer, bonus):
    tokenizer, models = bf16_pair
    combination = make_combination(standard, 2, **({"alpha": 0.1} if standard == "cd" else {"lam": 0.5}))
    members = [Member(m, name=f"m{i}") for i, m in enumerate(models)]
    fast = Engine(members, make_plan(method, 2, combination, gamma, proposer, bonus))
    slow = Engine(members, make_plan(standard, 2, combination, 1))
    accepted = 0
    for text in PROMPTS:
        ids = tokenizer(text)["input_ids"]
        out = fast.generate(ids, max_new_tokens=2 * N_NEW, temperature=0, eos_token_ids=[])
        base = slow.generate(ids, max_new_tokens=2 * N_NEW, temperature=0, eos_token_ids=[])
        assert out.tokens == base.tokens, f"{method} parted from {standard} in bf16 on {text!r}"
        accepted += out.stats.accepted
    assert accepted > 0  # verify blocks of several rows really ran
