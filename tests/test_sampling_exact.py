"""Sampling exactness, Monte Carlo: the first 3 emitted tokens are distributed as token-by-token
sampling from r, for sd, Naive-CoS (both bonus modes) and CoS with n = 2 and 3.

Vocabulary of 4 -> 64 outcomes for 3 tokens. Test statistic: the L1 distance between the empirical
and the exact distribution. By the Bretagnolle-Huber-Carol inequality,
P(L1 >= λ) <= 2^K exp(-N λ² / 2), so the threshold λ = sqrt(2 (K ln 2 + ln(1/δ)) / N) has a
false-failure probability of at most δ = 1e-6 per test. The negative control (a residual drawn from
r instead of norm(max(0, r - q)), a classic bug) must exceed the same threshold.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter

import pytest

pytestmark = pytest.mark.slow
import torch

from cos import Engine, SamplingParams, make_combination, make_plan
from cos import acceptance
from conftest import force_every_length
from table_member import TableMember

VOCAB, N_TOKENS, N_SAMPLES, DELTA = 4, 3, 8000, 1e-6
PROMPT = [1, 2]
K = VOCAB**N_TOKENS
THRESHOLD = math.sqrt(2 * (K * math.log(2) + math.log(1 / DELTA)) / N_SAMPLES)


def exact_distribution(combination_members, combination, params) -> dict[tuple, float]:
    """P(x1..x3) = Π r(x_t | prompt, x_<t), enumerated."""
    out = {}
    for tokens in itertools.product(range(VOCAB), repeat=N_TOKENS):
        p, seq = 1.0, list(PROMPT)
        for t in tokens:
            s = torch.tensor(seq)
            logits = [m.logits_at(s, torch.tensor([len(seq)])) for m in combination_members]
            p *= float(combination.distribution(logits, params)[0, t])
            seq.append(t)
        out[tokens] = p
    return out


def l1_distance(engine: Engine, exact: dict[tuple, float], temperature: float, **options) -> float:
    """options: more sampling options (top_k, top_p), as `exact` was computed with."""
    counts = Counter(
        tuple(engine.generate(PROMPT, max_new_tokens=N_TOKENS, temperature=temperature, seed=s,
                              eos_token_ids=[], **options).tokens)
        for s in range(N_SAMPLES)
    )
    return sum(abs(counts[x] / N_SAMPLES - p) for x, p in exact.items())


CASES = {
    "sd": ("sd", 2, 2, None, "none"),
    "naive_none": ("we_sd", 2, 3, None, "none"),
    "naive_exact": ("we_sd", 2, 2, None, "exact"),
    "cd_naive_exact": ("cd_sd", 2, 2, None, "exact"),
    "cos_2": ("we_chef", 2, [1, 2], None, "none"),
    "cd_cos_2": ("cd_chef", 2, [1, 3], None, "none"),
    "naive_3": ("we_sd", 3, 2, None, "exact"),
    "cos_3": ("we_chef", 3, [2, 1, 1], None, "none"),
    # drafts cut after a token its proposer gave < 0.95 (these tables are peaked): the length depends on
    # the draft; drafted tokens per round fall from 2.0-2.35 to 1.65 (300 seeds)
    "sd_threshold": ("sd", 2, 3, None, "none", 0.95),
    "naive_exact_threshold": ("we_sd", 2, 3, None, "exact", 0.95),
    "cd_cos_threshold": ("cd_chef", 2, [1, 3], None, "none", 0.95),
}


def table_combination(method: str, n: int):
    """The r these tests use for a method's family on n table members (None: sd, the target's own)."""
    if method == "sd":
        return None
    if method.startswith("cd"):
        return make_combination("cd", n, alpha=0.5)
    return make_combination("we", n, weights=[0.6, 0.4] if n == 2 else [0.5, 0.3, 0.2])


def build(case: str, temperature: float = 1.0, schedule: str = "fixed"):
    method, n, gamma, proposer, bonus, *threshold = CASES[case]
    members = [TableMember(seed=10 + i, vocab=VOCAB, name=f"m{i}") for i in range(n)]
    plan = make_plan(method, n, table_combination(method, n), gamma, proposer, bonus, *threshold)
    engine = Engine(members, plan)
    if schedule == "varied":  # draft lengths 0..γ from round to round, chosen from past acceptances
        force_every_length(engine)
    in_r = members[:1] if method == "sd" else members
    return engine, exact_distribution(in_r, plan.combination, SamplingParams(temperature))


@pytest.mark.parametrize("case", CASES)
def test_emitted_distribution_is_r(case):
    engine, exact = build(case)
    distance = l1_distance(engine, exact, 1.0)
    assert distance < THRESHOLD, f"{case}: L1 {distance:.4f} >= {THRESHOLD:.4f} (false alarm prob <= {DELTA})"
    assert engine.last.stats.drafted > 0


VARIED = ["sd", "naive_none", "naive_exact", "cd_cos_2", "cos_3", "naive_exact_threshold"]


@pytest.mark.parametrize("case", VARIED)
def test_emitted_distribution_is_r_with_varying_draft_lengths(case):
    """The adaptive schedule's setting: the draft length (0 = a standard round) changes from round to
    round as a function of past acceptances. The output must still be distributed as r."""
    engine, exact = build(case, schedule="varied")
    distance = l1_distance(engine, exact, 1.0)
    assert distance < THRESHOLD, f"{case}: L1 {distance:.4f} >= {THRESHOLD:.4f} (false alarm prob <= {DELTA})"
    assert len(engine.schedule.last_run) == engine.schedule.gamma + 1  # every length ran, 0 included


def test_with_temperature_and_top_k():
    engine, exact = build("cos_2", temperature=0.7)
    assert l1_distance(engine, exact, 0.7) < THRESHOLD


def residual_from_r(r, q):
    """The negative control: the residual drawn from r itself instead of norm(max(0, r - q))."""
    return r


@pytest.mark.parametrize("case", ["naive_none", "cos_2"])
def test_negative_control_is_rejected(case, monkeypatch):
    monkeypatch.setattr(acceptance, "residual_distribution", residual_from_r)
    engine, exact = build(case)
    distance = l1_distance(engine, exact, 1.0)
    assert distance >= THRESHOLD, f"the test cannot tell a wrong residual apart (L1 {distance:.4f})"
