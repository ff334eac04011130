"""we_mix (ME) and we_mix_sd (the coin-first hybrid): exact by Monte Carlo, deterministic where they
should be, the cost model against brute force, and refused outside their exact domain.

Monte Carlo: test_sampling_exact's helpers and bound (first 3 tokens over a 4-token vocabulary, 8,000
generations, false-failure probability <= 1e-6 per test); the negative control (foreign positions
accepted outright) must exceed the same bound. A few cases run by default, the full grid is `slow`.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from conftest import force_every_length, members
from cos import Custom, Engine, SamplingParams, make_combination, make_plan
from cos.acceptance import NO_TOKEN
from cos.member import Member
from cos.methods import kinds as kinds_loop
from cos.methods import mixture as mixture_loop
from cos.mixture import Coins, block_seconds, plan_block, predicted_speedup, round_expectation
from cos.sampling import sample, to_probs
from cos.round_kinds import PROBE_COST, WARM_ROUNDS, KindChoice
from cos.schedule import PROBE_EVERY, CallCosts, Schedule
from table_member import TableMember
from test_sampling_exact import THRESHOLD, VOCAB, exact_distribution, l1_distance

PROMPT = [3, 17, 42, 8, 23]
WEIGHTS = {(2, "even"): [0.5, 0.5], (2, "skewed"): [0.3, 0.7], (3, "even"): [1 / 3, 1 / 3, 1 / 3],
           (3, "skewed"): [0.2, 0.3, 0.5]}
SAMPLING = {"T1": dict(temperature=1.0), "T0.7_top_p": dict(temperature=0.7, top_p=0.8)}


def mixture_engine(method: str, n: int, weights: str, gamma: int = 2, proposer: int | None = None,
                   schedule: str | None = None) -> tuple[Engine, list[TableMember]]:
    table = [TableMember(seed=10 + i, vocab=VOCAB, name=f"m{i}") for i in range(n)]
    combination = make_combination("we", n, weights=WEIGHTS[n, weights])
    if method == "we_mix":
        plan = make_plan(method, n, combination)
    else:
        plan = make_plan(method, n, combination, gamma, proposer, schedule=schedule)
    return Engine(table, plan), table


def distance(engine: Engine, table, sampling: str) -> float:
    options = SAMPLING[sampling]
    exact = exact_distribution(table, engine.plan.combination, SamplingParams(**options))
    return l1_distance(engine, exact, **options)


# ----------------------------------------------------------------- exactness, Monte Carlo
FAST = [("we_mix", 2, "skewed", "T1"), ("we_mix_sd", 2, "even", "T0.7_top_p"), ("we_mix_sd", 3, "skewed", "T1")]
GRID = [c for c in itertools.product(("we_mix", "we_mix_sd"), (2, 3), ("even", "skewed"), SAMPLING) if c not in FAST]


@pytest.mark.parametrize("method, n, weights, sampling",
                         FAST + [pytest.param(*c, marks=pytest.mark.slow) for c in GRID])
def test_emitted_distribution_is_r(method, n, weights, sampling):
    engine, table = mixture_engine(method, n, weights)
    d = distance(engine, table, sampling)
    assert d < THRESHOLD, f"L1 {d:.4f} >= {THRESHOLD:.4f} (false alarm prob <= 1e-6)"
    if method == "we_mix_sd":
        assert engine.last.stats.drafted > 0


@pytest.mark.parametrize("n, proposer", [(2, 0), pytest.param(2, 1, marks=pytest.mark.slow),
                                         pytest.param(3, 0, marks=pytest.mark.slow)])
def test_hybrid_is_exact_whatever_the_rounds_it_runs(n, proposer):
    """m (foreign positions drafted per round, 0 = the ME step) varies from round to round with past
    acceptances, as the adaptive schedule's does, and so does the kind of round: mixture rounds and CoS
    episodes (alternate proposals against r, their chains of every length, dropped ones too) take turns;
    the proposer may be the larger-weight member."""
    engine, table = mixture_engine("we_mix_sd", n, "skewed", gamma=3, proposer=proposer, schedule="adaptive")
    force_every_length(engine)
    d = distance(engine, table, "T1")
    assert d < THRESHOLD, f"L1 {d:.4f} >= {THRESHOLD:.4f}"
    assert len(engine.schedule.last_run) == 4  # m = 0..3 all ran
    assert all(engine.kinds.last_run.values()) and len(engine.kinds.schedules["cos"].last_run) == 4  # so did CoS chains


def peek_at_the_coins(loop):
    """The negative control's choice: a mixture round when the next coin is the proposer's, else CoS:
    a choice made from the coins the mixture round then reads."""
    coins = loop.loops["mixture"].coins
    state = coins.generator.get_state()
    first = coins.draw(1)[0]
    coins.generator.set_state(state)
    return "mixture" if first == loop.loops["mixture"].s else "cos"


def test_a_choice_of_round_that_reads_the_coins_is_caught(monkeypatch):
    """Why the kind is chosen from the past only: chosen from the coins it would read, mixture rounds run
    where the proposer owns the next position and CoS elsewhere, and r is lost (the test must see it)."""
    monkeypatch.setattr(kinds_loop.KindsLoop, "_next_kind", peek_at_the_coins)
    engine, table = mixture_engine("we_mix_sd", 2, "even", schedule="adaptive")
    d = distance(engine, table, "T1")
    assert d >= THRESHOLD, f"the test cannot tell a choice made from the coins apart (L1 {d:.4f})"


def accept_outright(draft, q, r, greedy, generator):
    """The negative control: foreign positions accepted without a test (bonus kept)."""
    k = draft.shape[0]
    bonus = sample(r[k:], generator)[0] if r.shape[0] == k + 1 else torch.tensor(NO_TOKEN)
    return torch.tensor(k), bonus


def test_negative_control_is_rejected(monkeypatch):
    monkeypatch.setattr(mixture_loop, "verify_block", accept_outright)
    engine, table = mixture_engine("we_mix_sd", 2, "even")
    d = distance(engine, table, "T1")
    assert d >= THRESHOLD, f"the test cannot tell foreign positions accepted outright apart (L1 {d:.4f})"


# ----------------------------------------------------------------- deterministic
@pytest.mark.parametrize("method", ["we_mix", "we_mix_sd"])
def test_seeded_output_is_reproducible(models, method):
    plan = lambda: make_plan(method, 2, make_combination("we", 2, lam=0.3), *([] if method == "we_mix" else [4]))
    outs = [Engine(members(models["base"], models["stranger"]), plan()).generate(
        PROMPT, max_new_tokens=24, temperature=1, seed=s, eos_token_ids=[]).tokens for s in (5, 5, 6)]
    assert outs[0] == outs[1] and outs[0] != outs[2]


class CheckedMember(Member):
    """A member that checks every forward against a fresh, cache-free forward over the same tokens."""

    def score(self, seq, n=1):
        fed = seq.shape[0] - min(self.n_cached, seq.shape[0] - n)
        got = super().score(seq, n)
        with torch.inference_mode():
            fresh = self.model(input_ids=seq[None]).logits[0, -n:]
        assert torch.allclose(got, fresh, atol=1e-4), f"{self.name}: {(got - fresh).abs().max():.2e}"
        self.longest_catch_up = max(getattr(self, "longest_catch_up", 0), fed)
        return got


@pytest.mark.parametrize("method, gamma, schedule", [("we_mix", 1, None), ("we_mix_sd", 4, None),
                                                     ("we_mix_sd", 3, "adaptive")])
def test_catch_up_equals_a_fresh_forward(models, method, gamma, schedule):
    """A member that sat out several positions feeds them all in one forward; its logits (and so its
    KV cache) equal a fresh forward over the same tokens, through rejections and roll-backs too, and
    (adaptive) through CoS episodes between mixture rounds, dropped chains included."""
    pair = [CheckedMember(m, name=f"m{i}", capacity=256) for i, m in enumerate((models["base"], models["close"]))]
    plan = make_plan(method, 2, make_combination("we", 2, lam=0.3), gamma, schedule=schedule)
    engine = Engine(pair, plan)
    if schedule:  # every m, every chain length, both kinds of round
        force_every_length(engine)
    out = engine.generate(PROMPT, max_new_tokens=40, temperature=1, seed=3, eos_token_ids=[])
    if schedule:
        assert all(out.stats.round_kinds.values()) and out.stats.predicted_speedup is None
    assert len(out.tokens) == 40
    assert max(m.longest_catch_up for m in pair) >= 3  # catch-up happened


def test_me_runs_one_member_per_token_and_predicts_its_speedup(models):
    engine = Engine(members(models["base"], models["stranger"]), make_plan("we_mix", 2, make_combination("we", 2)))
    stats = engine.generate(PROMPT, max_new_tokens=32, temperature=1, seed=1, eos_token_ids=[]).stats
    calls = [m.calls for m in stats.members]
    assert sum(calls) == stats.new_tokens == 32 and min(calls) > 0  # one forward per token, each member ran
    assert stats.drafted == stats.rounds == 0 and stats.proposer is not None and stats.cost_ratio is not None
    t = [m.seconds_per_call for m in stats.members]
    assert stats.predicted_speedup == pytest.approx(sum(t) / (0.5 * t[0] + 0.5 * t[1]))


@pytest.mark.parametrize("method", ["we_mix", "we_mix_sd"])
def test_a_member_nobody_needs_never_runs(models, method):
    """Weight 0: its positions never come up; all positions the proposer's: no verify pass at all."""
    plan = make_plan(method, 2, make_combination("we", 2, lam=0.0))
    engine = Engine(members(models["base"], models["stranger"]), plan)
    stats = engine.generate(PROMPT, max_new_tokens=12, temperature=1, eos_token_ids=[]).stats
    assert stats.members[1].calls == 0 and stats.rounds == 0 and stats.new_tokens == 12


def test_hybrid_with_every_position_foreign_verifies_each_block(models):
    combination = make_combination("we", 2, weights=[0.0, 1.0])  # the proposer (member 0) owns nothing
    engine = Engine(members(models["close"], models["base"]), make_plan("we_mix_sd", 2, combination, 3, proposer=0))
    stats = engine.generate(PROMPT, max_new_tokens=24, temperature=1, eos_token_ids=[]).stats
    assert stats.rounds > 0 and stats.drafted >= stats.accepted > 0 and stats.members[1].calls == stats.rounds


def test_me_steps_give_the_schedule_the_exact_acceptance_chance(models, monkeypatch):
    """Rounds of m = 0 draft nothing foreign, so the schedule would never again learn β once it chose ME
    (the exploration trap). After each ME step the proposer's next forward also returns its logits at
    that position: the schedule then sees Σ min(p_s, p_k) there, equal to a fresh computation."""
    base, stranger = models["base"], models["stranger"]
    params = SamplingParams(temperature=1.0)
    seen, fresh = [], []
    draft = mixture_loop.MixtureLoop._draft

    def checked_draft(loop, seq, k):
        if loop.own_step is not None and loop.own_step[0] == seq.shape[0] - 1:
            with torch.inference_mode():
                p_s = to_probs(base(input_ids=seq[None, :-1]).logits[0, -1], params)
            fresh.append(float(torch.minimum(p_s, loop.own_step[1]).sum()))
        return draft(loop, seq, k)

    monkeypatch.setattr(mixture_loop.MixtureLoop, "_draft", checked_draft)
    monkeypatch.setattr(Schedule, "observe_chance", lambda self, chance: seen.append(chance))
    plan = make_plan("we_mix_sd", 2, make_combination("we", 2), 3, proposer=0, schedule="adaptive")
    engine = Engine(members(base, stranger), plan)
    force_every_length(engine)  # m = 0 comes up whatever the costs
    engine.kinds = None  # mixture rounds only
    engine.generate(PROMPT, max_new_tokens=40, temperature=1, seed=2, eos_token_ids=[])
    assert len(seen) >= 3 and seen == pytest.approx(fresh, abs=1e-5)
    assert all(0.0 < c < 1.0 for c in seen)


def test_coins_follow_the_weights_and_never_draw_a_zero_weight():
    coins = Coins([0.25, 0.0, 0.75], seed=0)
    z = coins.draw(4000)
    assert 1 not in z and abs(z.count(0) / 4000 - 0.25) < 0.03
    assert coins.draw(50) != coins.draw(50)  # every round reads fresh coins


def test_the_faster_kind_of_round_runs_and_the_slower_is_revisited():
    kinds = KindChoice(("mixture", "cos"), {"cos": Schedule("adaptive", 3, 1)})
    for _ in range(WARM_ROUNDS):  # a kind's first rounds (measurement lengths, compiling) are not counted
        assert kinds.choose() == "mixture"
        kinds.observe("mixture", 20, 1.0)
    kinds.observe("mixture", 9, 1.0)
    assert kinds.choose() == "cos"  # not measured yet
    for _ in range(WARM_ROUNDS + 1):
        kinds.observe("cos", 10, 1.0)
    picks = []
    for _ in range(2 * PROBE_EVERY):
        picks.append(kinds.choose())
        kinds.observe(picks[-1], 10 if picks[-1] == "cos" else 9, 1.0)
    probes = [i for i, kind in enumerate(picks) if kind == "mixture"]
    assert len(probes) == 2 and probes[1] - probes[0] == PROBE_EVERY + 1  # a close loser: every 16 rounds
    for _ in range(30):  # the mixture rounds speed up (another stretch of text, another load): they win
        kinds.observe("mixture", 12, 1.0)
    assert kinds.choose() == "cos"  # 30 rounds since CoS ran: a probe
    kinds.observe("cos", 10, 1.0)
    assert kinds.choose() == "mixture" and kinds.rate("cos") == pytest.approx(10.0)
    kinds.start()
    assert kinds.chosen == {"mixture": 0, "cos": 0}  # counts per generation, rates across them


def test_a_kind_far_behind_is_probed_rarely_enough_to_cost_little():
    """A probe of a slow kind costs its round's seconds beyond what its tokens are worth at the best
    rate; it waits until that is at most PROBE_COST of the time since it last ran."""
    kinds = KindChoice(("chain", "tree"))
    for _ in range(WARM_ROUNDS + 1):
        kinds.observe("chain", 2, 1.0)  # 2 tokens/s
        kinds.observe("tree", 2, 4.0)  # 0.5 tokens/s in rounds of 4 s: each probe loses 3 s
    picks = []
    for _ in range(400):
        picks.append(kinds.choose())
        kinds.observe(picks[-1], 2, 1.0 if picks[-1] == "chain" else 4.0)
    probes = [i for i, kind in enumerate(picks) if kind == "tree"]
    gaps = [b - a for a, b in zip(probes, probes[1:])]
    assert len(probes) >= 2 and all(gap - 1 == pytest.approx(3.0 / PROBE_COST, abs=1) for gap in gaps)
    lost = len(probes) * 3.0 / sum(1.0 if kind == "chain" else 4.0 for kind in picks)
    assert lost <= PROBE_COST * 1.05  # the share of the time the probes lost


def test_a_member_with_weight_zero_keeps_the_hybrid_to_mixture_rounds(models):
    """CoS verifies against r with every member's row: a weight-0 member would run for nothing."""
    plan = make_plan("we_mix_sd", 2, make_combination("we", 2, lam=0.0), 3, schedule="adaptive")
    engine = Engine(members(models["base"], models["stranger"]), plan)
    assert engine.kinds is None
    stats = engine.generate(PROMPT, max_new_tokens=12, temperature=1, eos_token_ids=[]).stats
    assert stats.members[1].calls == 0 and stats.round_kinds == {}


# ----------------------------------------------------------------- the cost model
def brute_force(weights, proposer, m, cap, beta, t):
    """E[tokens], E[seconds] of a round by enumerating its coins and acceptance outcomes, via plan_block.
    t(i, n): member i's seconds for a forward that feeds n tokens; beta: one chance, or one per depth."""
    betas = [beta] * cap if isinstance(beta, float) else beta
    tokens = seconds = 0.0
    for z in itertools.product(range(len(weights)), repeat=cap + 1):
        p = math.prod(weights[i] for i in z)
        b = plan_block(z, proposer, m, cap)
        seconds += p * (b.drafted * t(proposer, 1) + sum(t(k, b.drafted + 1) for k in b.verifiers))
        for i, f in enumerate(b.foreign):  # the first rejection at the i-th foreign position
            tokens += p * math.prod(betas[:i]) * (1 - betas[i]) * (f + 1)
        reach = math.prod(betas[:len(b.foreign)])
        tokens += p * reach * (b.drafted + 1)
        fed = 1 if b.closing == proposer else b.drafted + 1  # another owner catches up on the block
        seconds += p * reach * (0.0 if b.closing in b.verifiers else t(b.closing, fed))
    return tokens, seconds


@pytest.mark.parametrize("weights, proposer", [([0.5, 0.5], 0), ([0.3, 0.7], 1), ([0.2, 0.3, 0.5], 0)])
@pytest.mark.parametrize("m", [0, 1, 2, 4])
@pytest.mark.parametrize("per_token", [0.0, 0.5], ids=["flat", "growing"])
def test_cost_model_equals_brute_force(weights, proposer, m, per_token):
    """flat: a forward costs the same whatever it feeds (memory-bound); growing: each token fed adds
    per_token of a step (compute-bound), so an ME catch-up over a long block costs more."""
    t = [0.39, 1.0, 0.8][: len(weights)]
    seconds = lambda i, n: t[i] * (1 + per_token * (n - 1))
    got = round_expectation(weights, proposer, m, 4, 0.7, seconds)
    assert got == pytest.approx(brute_force(weights, proposer, m, 4, 0.7, seconds))
    by_depth = [0.8, 0.6, 0.5, 0.3]  # the (i+1)-th foreign position of a round accepted less often
    got = round_expectation(weights, proposer, m, 4, by_depth, seconds)
    assert got == pytest.approx(brute_force(weights, proposer, m, 4, by_depth, seconds))


def test_a_round_is_priced_by_the_calls_its_block_makes():
    """What the schedule's calibration compares a round's measured seconds with: d proposer steps, a
    pass of d + 1 tokens per verifier, and for the closing position nothing (a verifier owns it: the
    bonus), a proposer step, or its owner's catch-up over the block (d + 1 tokens fed)."""
    t = lambda i, n: [0.5, 1.0, 2.0][i] * (1 + 0.25 * (n - 1))
    assert block_seconds(3, {1}, 1, 0, t) == (3 * 0.5 + 1.75, 0.0)
    assert block_seconds(3, {1}, 0, 0, t) == (3 * 0.5 + 1.75, 0.5)
    assert block_seconds(3, {1}, 2, 0, t) == (3 * 0.5 + 1.75, 2.0 * 1.75)
    assert block_seconds(2, set(), 1, 0, t) == (2 * 0.5, 1.0 * 1.5)  # m = 0: the ME step closes
    assert block_seconds(2, {1}, 2, 0, lambda i, n: None if i == 2 else 1.0) is None


def test_cost_model_predictions():
    t = [0.39, 1.0]  # c = 0.39, λ = 0.5, β = 0.7 (the worked example)
    assert predicted_speedup([0.5, 0.5], 0, 0.7, t, 1, m=0) == pytest.approx(2.0)  # ME: exactly 2x
    assert predicted_speedup([0.3, 0.7], 0, 0.7, t, 1, m=0) == pytest.approx(1.39 / (0.3 * 0.39 + 0.7))
    assert predicted_speedup([0.5, 0.5], 0, 0.7, t, 16) == pytest.approx(2.18, abs=0.01)  # best m: 1
    assert predicted_speedup([0.5, 0.5], 0, 0.7, [1.0, 1.0], 5) == pytest.approx(2.0)  # c = 1: ME's 2x
    assert predicted_speedup([0.5, 0.5], 0, 0.3, t, 5) == pytest.approx(2.0)  # low β: the best policy is ME


def test_adaptive_schedule_drafts_what_the_cost_model_prefers():
    """Once its probes ran, the schedule picks m by the loop's rate: one foreign position per pass at
    β = 0.7, c = 0.39 (the worked example); ME (m = 0) at c = 1, where a verify pass costs a full step."""
    for t, expected in (([0.39, 1.0], 1), ([1.0, 1.0], 0)):
        schedule = Schedule("adaptive", 5, 1)
        schedule.rounds, schedule.last_run = 1, {5: 1, 0: 1, 1: 1}  # the first probes are done
        for accepted in [1] * 700 + [0] * 300:  # rounds of one foreign draft, accepted at β = 0.7
            schedule.observe(1, accepted)
        expectation = lambda m, beta: round_expectation([0.5, 0.5], 0, m, 5, beta, lambda i, n: t[i])
        assert schedule.length(CallCosts(), [CallCosts()], True, expectation) == expected


def test_adaptive_schedule_pays_for_what_the_model_does_not_see():
    """The cost model prefers m = 1 at the worked example; rounds that draft foreign positions then
    measure 2x what it modelled (an overhead it does not see): the calibrated choice falls to ME, and
    comes back to m = 1 once such rounds measure as modelled again."""
    t = [0.39, 1.0]
    expectation = lambda m, beta: round_expectation([0.5, 0.5], 0, m, 5, beta, lambda i, n: t[i])
    schedule = Schedule("adaptive", 5, 1)
    schedule.rounds, schedule.last_run = 1, {5: 1, 0: 1, 1: 1}
    for accepted in [1] * 700 + [0] * 300:
        schedule.observe(1, accepted)
    choose = lambda: schedule.length(CallCosts(), [CallCosts()], True, expectation)
    assert choose() == 1
    for m in [0] * 10 + [1, 2, 5] * 3:
        modelled = expectation(m, schedule.alpha)[1]
        schedule.observe_seconds(m, modelled * (1.0 if m == 0 else 2.0), modelled)
    assert schedule.seconds_ratio(0) < 1.3 < 1.6 < schedule.seconds_ratio(1)  # m = 0: shrunk towards all rounds
    assert choose() == 0
    for _ in range(30):  # the overhead is gone
        modelled = expectation(1, schedule.alpha)[1]
        schedule.observe_seconds(1, modelled, modelled)
    assert choose() == 1


def test_probes_skip_a_neighbour_that_loses_clearly():
    """With its own model, the schedule probes m ± 1 only while it is within PROBE_MARGIN of the best:
    at c = 1 (ME wins by far) the probe rounds stay ME; at the worked example m = 0 and 2 are probed."""
    for t, probed in (([1.0, 1.0], set()), ([0.39, 1.0], {0, 2})):
        expectation = lambda m, beta: round_expectation([0.5, 0.5], 0, m, 5, beta, lambda i, n: t[i])
        schedule = Schedule("adaptive", 5, 1)
        schedule.rounds, schedule.last_run = 1, {5: 1, 0: 1, 1: 1}
        for accepted in [1] * 700 + [0] * 300:
            schedule.observe(1, accepted)
        chosen = [schedule.length(CallCosts(), [CallCosts()], True, expectation) for _ in range(4 * PROBE_EVERY)]
        best = max(set(chosen), key=chosen.count)
        assert set(chosen) - {best} == probed, t


def test_seconds_ratio_is_shrunk_towards_all_rounds():
    schedule = Schedule("adaptive", 5, 1)
    assert schedule.seconds_ratio(3) == 1.0  # nothing reported yet
    for _ in range(50):
        schedule.observe_seconds(0, 1.5, 1.0)
    assert schedule.seconds_ratio(0) == pytest.approx(1.5)
    assert schedule.seconds_ratio(4) == pytest.approx(1.5)  # never seen: the ratio over all rounds
    schedule.observe_seconds(4, 3.0, 1.0)  # one round of 4 at 3x: pulled up, not all the way
    assert 1.5 < schedule.seconds_ratio(4) < 3.0


# ----------------------------------------------------------------- outside the exact domain
def table_pair():
    return [TableMember(seed=10 + i, vocab=VOCAB) for i in range(2)]


def probs_sum(values):
    return values[0] + values[1]


@pytest.mark.parametrize("method", ["we_mix", "we_mix_sd"])
@pytest.mark.parametrize("combination, applies", [
    (lambda: make_combination("cd", 2), "use cd_chef"),
    (lambda: Custom(n_members=2, fn=probs_sum, declared_space="probs"), "use custom_chef"),
    (lambda: Custom(n_members=2, fn=probs_sum, declared_space="raw-logits"), "use custom_chef"),  # processed after
])
def test_only_a_weighted_ensemble_is_a_mixture(method, combination, applies):
    with pytest.raises(ValueError, match=f"method {method} samples r as a mixture, exact only for a weighted "
                                         f"ensemble in probs space.*{applies}"):
        make_plan(method, 2, combination())


@pytest.mark.parametrize("method", ["we_mix", "we_mix_sd"])
def test_greedy_is_refused_before_any_model_work(method, monkeypatch):
    engine = Engine(table_pair(), make_plan(method, 2, make_combination("we", 2)))
    monkeypatch.setattr(TableMember, "prefill", lambda *a: pytest.fail("a member ran"))
    with pytest.raises(ValueError, match="exact under sampling only.*use we_chef"):
        engine.generate(PROMPT[:2], max_new_tokens=4, temperature=0)


def test_greedy_is_refused_by_the_runner_config():
    from omegaconf import OmegaConf

    from cos.runner.config import run_config
    from test_configs import composed

    cfg = OmegaConf.to_container(composed(["method=we_mix", "method.generate.temperature=0"]), resolve=True)
    with pytest.raises(ValueError, match="use we_chef.*method.generate.temperature"):
        run_config(cfg)


@pytest.mark.parametrize("method, setting, message", [
    ("we_mix", dict(schedule="adaptive"), "drafts nothing: schedule applies"),
    ("we_mix", dict(proposer=0), "drafts nothing: proposer applies"),
    ("we_mix", dict(draft_threshold=0.4), "drafts nothing: draft_threshold applies"),
    ("we_mix_sd", dict(draft_threshold=0.4), "fixed by the coins alone, so draft_threshold does not apply"),
    ("we_mix_sd", dict(bonus="exact"), "would ignore bonus='exact'"),
])
def test_settings_a_mixture_would_ignore_are_refused(method, setting, message):
    with pytest.raises(ValueError, match=message):
        make_plan(method, 2, make_combination("we", 2), **setting)
