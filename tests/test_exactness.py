"""Greedy exactness: every accelerated method reproduces the naive reference token for token.

fp32, CPU, tiny random members, 64 new tokens. The three regimes are built in: the proposer
identical to the verifier (everything accepted), an unrelated proposer (almost nothing accepted),
and a close relative (partial acceptance). The criterion (tests/greedy_check.py): equal, or a
floating-point near-tie at the first divergence. Real models: tests/test_real_models.py.
"""

from __future__ import annotations

import pytest

from conftest import RUNTIMES, engine_on, members
from greedy_check import assert_same_greedy
import torch

from cos import Engine, SamplingParams, make_combination, make_plan
from cos.member import Member
from cos.methods.reference import reference_generate
from cos.proposer import MemberProposer

PROMPT = [3, 17, 42, 8, 23]
N_NEW = 64
GREEDY = SamplingParams(temperature=0)


_references: dict = {}
_runtime = RUNTIMES[0]


@pytest.fixture(autouse=True, params=RUNTIMES)
def runtime(request):
    """Every test here runs on each member runtime (conftest.RUNTIMES)."""
    global _runtime
    _runtime = request.param
    return request.param


def reference(models_in_order, combination) -> list[int]:
    """The naive reference, computed once per (models, combination) for the whole module."""
    key = (tuple(id(m) for m in models_in_order), repr(combination))
    if key not in _references:
        _references[key] = reference_generate(models_in_order, combination, PROMPT, N_NEW, GREEDY)
    return _references[key]


def run(models_in_order, method, gamma, proposer=None, bonus="none", draft_threshold=0.0, **combo):
    n = len(models_in_order)
    combination = None if method in ("sd", "large_model") else make_combination(method.split("_")[0], n, **combo)
    plan = make_plan(method, n, combination, gamma, proposer, bonus, draft_threshold)
    engine = engine_on(_runtime, models_in_order, plan)
    return engine.generate(PROMPT, max_new_tokens=N_NEW, temperature=0, eos_token_ids=[]), plan


REGIMES = {"all_accepted": "twin", "partial": "close", "nothing_accepted": "stranger"}
TWO = [("we_sd", 5, "none"), ("we_sd", 1, "exact"), ("we_sd", 5, "exact"), ("cd_sd", 3, "none"),
       ("cd_sd", [1, 5], "exact"), ("we_chef", 1, "none"), ("we_chef", 5, "none"), ("we_chef", [1, 5], "none"),
       ("we_chef", [5, 1], "none"), ("cd_chef", [1, 5], "none"), ("cd_chef", 5, "none"), ("cd_chef", [3, 2], "none")]


@pytest.mark.parametrize("regime", REGIMES)
@pytest.mark.parametrize("method,gamma,bonus", TWO)
def test_two_members_equal_reference(models, regime, method, gamma, bonus):
    pair = [models["base"], models[REGIMES[regime]]]
    out, plan = run(pair, method, gamma, proposer=1 if method.endswith("_sd") else None, bonus=bonus)
    ref = reference(pair, plan.combination)
    assert len(out.tokens) == N_NEW
    assert_same_greedy(out.tokens, ref, PROMPT, pair, plan.combination)
    if _runtime == "varied" and regime != "all_accepted":  # the forced schedule really ran standard rounds
        # and several draft lengths (all accepted under CoS: proposals alternate, the schedule is rarely asked)
        assert out.stats.standard_rounds > 0 and len(out.stats.draft_lengths) >= min(3, plan.gammas[plan.proposer] + 1)
    rate = out.stats.acceptance_rate
    if regime == "all_accepted":
        assert rate == 1.0  # identical members: argmax r = each member's argmax, every draft accepted
    if regime == "nothing_accepted" and method.startswith("cd") and plan.proposer == 1:
        assert rate < 0.5  # (a WE proposer of weight λ keeps acceptance >= λ, Thm 3.2)


THREE = [("we_sd", 5), ("we_sd", [1, 1, 3]), ("we_chef", [1, 1, 1]), ("we_chef", [3, 2, 1]),
         ("we_chef", [1, 5, 2]), ("we_chef", 4)]


@pytest.mark.parametrize("regime", REGIMES)
@pytest.mark.parametrize("method,gamma", THREE)
def test_three_members_equal_reference(models, regime, method, gamma):
    trio = [models["base"], models["third"], models[REGIMES[regime]]]
    out, plan = run(trio, method, gamma, weights=[0.5, 0.2, 0.3])
    ref = reference(trio, plan.combination)
    assert_same_greedy(out.tokens, ref, PROMPT, trio, plan.combination)


@pytest.mark.parametrize("regime", REGIMES)
@pytest.mark.parametrize("gamma", [1, 4])
def test_sd_equals_plain_greedy_of_target(models, regime, gamma):
    target, draft = models["base"], models[REGIMES[regime]]
    out, plan = run([target, draft], "sd", gamma)
    ref = reference([target], plan.combination)
    assert out.tokens == ref
    if regime == "all_accepted":
        assert out.stats.acceptance_rate == 1.0
        if _runtime != "varied":  # (varied: rounds of fewer drafts)
            assert out.stats.mean_acceptance_length == gamma + 1


THRESHOLDED = [("sd", 6, "none"), ("we_sd", 6, "none"), ("cd_sd", 6, "exact"), ("we_chef", [1, 6], "none"),
               ("cd_chef", [1, 6], "none")]


@pytest.mark.parametrize("method,gamma,bonus", THRESHOLDED)
def test_draft_threshold_changes_speed_not_tokens(models, method, gamma, bonus):
    """Drafts cut where the proposer is unsure (its own max probability is < 0.25 about half the time
    on this pair): the output is still the reference's."""
    pair = [models["base"], models["close"]]
    out, plan = run(pair, method, gamma, proposer=1 if method.endswith("_sd") else None, bonus=bonus,
                    draft_threshold=0.25)
    in_r = pair[:1] if method == "sd" else pair  # sd: r is the target's alone
    assert_same_greedy(out.tokens, reference(in_r, plan.combination), PROMPT, in_r, plan.combination)
    if plan.loop != "cos" and _runtime != "varied":  # one draft per round: cut drafts are shorter than γ, and not all are 1 long
        assert 1 < out.stats.drafted / out.stats.rounds < 6
    assert out.stats.predicted_speedup is None  # γ is not fixed: no closed form


def test_draft_threshold_cuts_after_the_first_unsure_token(models):
    """The rule itself: the draft is the fixed-γ draft up to and including its first token with own
    probability below the threshold."""
    seq = torch.tensor(PROMPT)
    full = MemberProposer(Member(models["close"]), GREEDY, None).propose(seq, 12)
    confidence = full.logits.softmax(-1).gather(-1, full.tokens[:, None])[:, 0].tolist()
    threshold = sorted(confidence)[6]
    cut = MemberProposer(Member(models["close"]), GREEDY, None, stop_below=threshold).propose(seq, 12)
    first_unsure = next(i for i, c in enumerate(confidence) if c < threshold)
    assert cut.tokens.tolist() == full.tokens[: first_unsure + 1].tolist()


def test_draft_threshold_is_checked():
    with pytest.raises(ValueError, match="draft_threshold must be a probability"):
        make_plan("sd", 2, gamma=5, draft_threshold=1.5)
    with pytest.raises(ValueError, match="drafts nothing"):
        make_plan("we", 2, make_combination("we", 2, lam=0.5), draft_threshold=0.4)


def test_standard_and_large_model_equal_reference(models):
    pair = [models["base"], models["close"]]
    for method in ("we", "cd"):
        out, plan = run(pair, method, 1)
        assert out.tokens == reference(pair, plan.combination)
    out, plan = run([models["base"]], "large_model", 1)
    assert out.tokens == reference([models["base"]], plan.combination)


def test_regimes_are_what_they_claim(models):
    """The partial regime really is partial, so the suite covers accepts and rejects in one run."""
    out, _ = run([models["base"], models["close"]], "we_sd", 5, proposer=1)
    assert 0.2 < out.stats.acceptance_rate < 0.95
    out, _ = run([models["base"], models["stranger"]], "we_sd", 5, proposer=1)
    assert out.stats.acceptance_rate < 0.5
