"""KV-cache invariant, seeds, stopping, streaming, statistics, and bad input (before any model runs)."""

from __future__ import annotations


import pytest
import torch

from conftest import members, tiny_model
from cos import Engine, make_combination, make_plan
from cos.engine import plan_from_kwargs
from cos.loading import check_vocabularies

PROMPT = [3, 17, 42, 8, 23]


def we_engine(models, method="we_chef", gamma=(1, 5), **kw):
    plan = make_plan(method, 2, make_combination("we", 2), list(gamma) if not isinstance(gamma, int) else gamma, **kw)
    return Engine(members(*models), plan)


# ----------------------------------------------------------------- KV invariant (every cache kind: test_runtime.py)
def test_members_caches_valid_after_a_generation(models):
    engine = we_engine([models["base"], models["close"]])
    out = engine.generate(PROMPT, max_new_tokens=30, temperature=1.0, seed=3, eos_token_ids=[])
    full = torch.tensor(PROMPT + out.tokens)
    for m in engine.members:
        n = 3
        with torch.inference_mode():
            assert torch.allclose(m.score(full, n), m.model(input_ids=full[None]).logits[0, -n:], atol=1e-5)


# ----------------------------------------------------------------- seeds
@pytest.mark.parametrize("method,gamma", [("we_chef", (1, 5)), ("we_sd", 4), ("we", 1)])
def test_same_seed_same_output_and_greedy_ignores_seed(models, method, gamma):
    engine = we_engine([models["base"], models["close"]], method, gamma)
    run = lambda seed, t: engine.generate(PROMPT, max_new_tokens=40, temperature=t, seed=seed, eos_token_ids=[]).tokens
    assert run(1, 1.0) == run(1, 1.0)
    assert run(1, 1.0) != run(2, 1.0)
    assert run(1, 0.0) == run(2, 0.0)


# ----------------------------------------------------------------- stopping
def test_eos_inside_an_accepted_block_cuts_there(models):
    engine = we_engine([models["base"], models["twin"]], "we_sd", 5, proposer=1)
    ref = engine.generate(PROMPT, max_new_tokens=40, temperature=0, eos_token_ids=[]).tokens
    eos = ref[7]
    first = ref.index(eos)
    out = engine.generate(PROMPT, max_new_tokens=40, temperature=0, eos_token_ids=[eos])
    assert out.tokens == ref[: first + 1] and out.stats.stop_reason == "eos"


@pytest.mark.parametrize("budget", [1, 2, 7, 13])
def test_max_new_tokens_is_exact_for_every_method(models, budget):
    for method, gamma in [("we_sd", 5), ("we_chef", (1, 5)), ("we", 1)]:
        engine = we_engine([models["base"], models["twin"]], method, gamma)
        out = engine.generate(PROMPT, max_new_tokens=budget, temperature=0, eos_token_ids=[])
        assert len(out.tokens) == budget and out.stats.stop_reason == "length"


def test_streaming_yields_the_same_tokens(models):
    engine = we_engine([models["base"], models["close"]])
    pieces = list(engine.stream_tokens(PROMPT, max_new_tokens=25, temperature=0, eos_token_ids=[]))
    assert sum(pieces, []) == engine.last.tokens and len(pieces) > 1


# ----------------------------------------------------------------- statistics
def test_statistics_are_consistent(models):
    engine = we_engine([models["base"], models["close"]], "we_sd", 4, proposer=1)
    s = engine.generate(PROMPT, max_new_tokens=40, temperature=0, eos_token_ids=[]).stats
    assert s.new_tokens == 40 and s.tokens_per_second > 0
    assert 0 <= s.accepted <= s.drafted and s.acceptance_rate == s.accepted / s.drafted
    assert s.mean_acceptance_length == 1 + s.accepted / s.rounds
    assert s.members[1].calls >= s.rounds and s.members[0].calls == s.rounds  # verifier: one call a round
    assert s.cost_ratio is not None and s.predicted_speedup is not None
    assert s.as_dict()["acceptance_rate"] == s.acceptance_rate


# ----------------------------------------------------------------- bad input, before any model runs
@pytest.mark.parametrize("kwargs,message", [
    (dict(method="we_chef", n_members=2, gamma=[1, 2, 3]), "one per member"),
    (dict(method="we_chef", n_members=2, gamma=0), "gamma must be an int >= 1"),
    (dict(method="we_sd", n_members=2, gamma=[1, -1]), "gamma must be an int >= 1"),
    (dict(method="we", n_members=2, lam=1.5), "lambda must be in [0, 1]"),
    (dict(method="we", n_members=3, weights=[0.5, 0.6, -0.1]), "weights must be >= 0"),
    (dict(method="we", n_members=3, weights=[0.5, 0.3, 0.3]), "must sum to 1"),
    (dict(method="we", n_members=3, weights=[0.5, 0.5]), "2 weights for 3 members"),
    (dict(method="custom", n_members=2, combination="custom", target="torch:stack", space="odds"), "unknown combination space"),
    (dict(method="custom", n_members=2, combination="custom", target="no.such.module:f"), "cannot import"),
    (dict(method="chef", n_members=2), "unknown method"),
    (dict(method="we_sd", n_members=2, bonus="free"), "unknown bonus mode"),
    (dict(method="sd", n_members=3), "needs 2 members"),
    (dict(method="cd", n_members=3), "2 members [expert, amateur]"),
])
def test_bad_method_config_is_refused_with_a_clear_message(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        plan_from_kwargs(**kwargs)


def test_mismatched_vocabularies_are_refused(models):
    other = tiny_model(3, vocab=80)
    with pytest.raises(ValueError, match="different vocabulary sizes"):
        check_vocabularies(members(models["base"], other))
    with pytest.raises(ValueError, match="different vocabulary sizes"):
        Engine(members(models["base"], other), make_plan("we", 2, make_combination("we", 2)))


def test_bad_prompts_are_refused_before_decoding(models):
    engine = we_engine([models["base"], models["close"]])
    with pytest.raises(ValueError, match="empty prompt"):
        engine.generate([], max_new_tokens=4)
    with pytest.raises(ValueError, match="does not fit the context window"):
        engine.generate([1] * 600, max_new_tokens=4)
    with pytest.raises(ValueError, match="needs a tokenizer"):
        engine.generate("hello", max_new_tokens=4)
    with pytest.raises(ValueError, match="temperature must be >= 0"):
        engine.generate(PROMPT, max_new_tokens=4, temperature=-1)
    assert all(m.stats.calls == 0 for m in engine.members)  # nothing ran
