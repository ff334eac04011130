"""The member runtime: preallocated KV cache, CPU thread policy, per-call costs, adaptive schedule."""

from __future__ import annotations

import logging
import random

import pytest
import torch
from transformers import DynamicCache

from conftest import PastDependentSchedule, force_every_length, members
from cos import Engine, make_combination, make_plan
from cos.kv_cache import PreallocatedLayer, is_preallocated, make_cache
from cos.member import Member
from cos.methods.reference import reference_generate
from cos.sampling import SamplingParams
from cos.schedule import PROBE_EVERY, CallCosts, Schedule, best_length, expected_tokens
from cos.threads import FIRST_PROBE, PROBE_SHARE, ThreadPolicy

PROMPT = [3, 17, 42, 8, 23]


# ----------------------------------------------------------------- preallocated KV cache
@pytest.mark.parametrize("kind,capacity", [("dynamic", 256), ("preallocated", 4), ("preallocated", 256), ("static", 256)])
def test_rollback_then_redecode_equals_fresh_forward(models, kind, capacity):
    """After any mix of blocks and rollbacks, a member's logits equal a fresh forward (capacity 4: the
    preallocated buffers also grow several times mid-sequence;
    static: a rollback only rewinds the write position, stale entries must stay masked)."""
    model = models["base"]
    member = Member(model, cache=kind, capacity=capacity)
    member.cache = make_cache(model.config, capacity=capacity, kind=kind)
    assert is_preallocated(member.cache) == (kind == "preallocated")
    rng = random.Random(1)
    seq = torch.tensor(PROMPT)
    member.prefill(seq)
    for _ in range(40):
        if rng.random() < 0.4 and seq.shape[0] > 3:  # a rejection: drop a random tail
            seq = seq[: rng.randint(2, seq.shape[0] - 1)]
            member.rollback(seq.shape[0] - rng.randint(0, 1))
        seq = torch.cat([seq, torch.randint(0, 64, (rng.randint(1, 4),))])  # a drafted block
        n = rng.randint(1, 3)
        got = member.score(seq, n)
        with torch.inference_mode():
            fresh = model(input_ids=seq[None]).logits[0, -n:]
        assert torch.allclose(got, fresh, atol=1e-4), f"cached logits drifted: {(got - fresh).abs().max():.2e}"
        assert int(member.cache.get_seq_length()) == seq.shape[0]


def test_preallocated_cache_is_reused_across_requests(models):
    member = Member(models["base"])
    member.prefill(torch.tensor(PROMPT * 4))
    member.score(torch.tensor(PROMPT * 4 + [1, 2]), 2)
    buffer = member.cache.layers[0]._k.data_ptr()
    member.prefill(torch.tensor(PROMPT * 3))  # a new request: nothing allocated
    member.score(torch.tensor(PROMPT * 3 + [5]), 1)
    assert member.cache.layers[0]._k.data_ptr() == buffer
    assert member.cache.get_seq_length() == len(PROMPT) * 3 + 1


def test_dynamic_and_preallocated_generate_the_same(models):
    pair = [models["base"], models["close"]]
    plan = lambda: make_plan("we_chef", 2, make_combination("we", 2), [1, 5])
    outs = [Engine(members(*pair, cache=c), plan()).generate(PROMPT, max_new_tokens=40, temperature=0,
                                                               eos_token_ids=[]).tokens
            for c in ("dynamic", "preallocated")]
    assert outs[0] == outs[1]


def test_models_with_other_layer_types_fall_back_to_dynamic(models, caplog):
    config = models["base"].config.__class__(**models["base"].config.to_dict())
    config.layer_types = ["sliding_attention"] * config.num_hidden_layers
    config.sliding_window = 8
    with caplog.at_level(logging.WARNING, logger="cos.kv_cache"):
        cache = make_cache(config)
    assert isinstance(cache, DynamicCache) and not is_preallocated(cache)
    assert "sliding_attention" in caplog.text and "dynamic KV cache" in caplog.text
    with pytest.raises(ValueError, match="unknown cache kind"):
        make_cache(config, kind="paged")


def test_preallocated_layer_crop_forms():
    layer = PreallocatedLayer(capacity=2)
    k = torch.randn(1, 2, 5, 4)
    keys, _ = layer.update(k, k)
    assert keys.shape[-2] == 5 and layer.capacity >= 5 and torch.equal(keys, k)
    layer.crop(-2)  # drop 2
    assert layer.get_seq_length() == 3
    layer.crop(1)  # keep 1 (transformers' positive form)
    assert layer.get_seq_length() == 1 and torch.equal(layer.keys, k[:, :, :1])


# ----------------------------------------------------------------- thread policy
def test_thread_policy_fixed_and_none():
    before = torch.get_num_threads()
    try:
        assert ThreadPolicy(1).choose(("m", 1)) == 1 and torch.get_num_threads() == 1
        torch.set_num_threads(2)
        assert ThreadPolicy(None).choose(("m", 1)) == 2  # left alone
        for bad in (0, -1, "many", 1.5, True):
            with pytest.raises(ValueError, match="threads must be 'auto' or an int"):
                ThreadPolicy(bad)
    finally:
        torch.set_num_threads(before)


def test_thread_policy_auto_follows_the_faster_count_and_notices_a_change():
    before = torch.get_num_threads()
    policy = ThreadPolicy("auto")
    policy.candidates = [2, 1]  # as on a 2-core machine, whatever this one has
    try:
        cost = {2: 1.0, 1: 1.8}  # quiet: all cores win
        picks = []
        for _ in range(200):
            t = policy.choose(("m", 1))
            picks.append(t)
            policy.observe(("m", 1), t, cost[t])
        assert picks[:2] == [2, 1] and picks[-50:].count(2) >= 48  # tried both, then mostly 2, probing rarely
        assert policy.arms[("m", 1)].probe_every > FIRST_PROBE  # the probes kept losing: rarer
        cost = {2: 3.2, 1: 2.0}  # a competitor arrives: a parked thread stalls every parallel region
        picks = []
        for _ in range(60):
            t = policy.choose(("m", 1))
            picks.append(t)
            policy.observe(("m", 1), t, cost[t])
        assert picks[-30:].count(1) >= 28
    finally:
        torch.set_num_threads(before)


def test_thread_policy_probes_a_far_slower_count_within_its_share_of_the_time():
    """Under a competitor a 2-thread forward with the kernels waits on its parked thread in every
    parallel region (measured 1.5-1.9 s against 0.05-0.1 s on 1 thread): a probe every LAST_PROBE calls
    would cost ~12%; the interval grows until a losing probe's extra seconds are PROBE_SHARE of the time."""
    before = torch.get_num_threads()
    policy = ThreadPolicy("auto")
    policy.candidates = [2, 1]
    cost = {2: 35.0, 1: 1.0}
    try:
        picks = [policy.observe(("m", 1), t, cost[t]) or t for t in (policy.choose(("m", 1)) for _ in range(3000))]
        probes = picks[2:].count(2)
        extra = probes * (cost[2] - cost[1])
        assert 1 <= probes <= 3, probes  # still looked again (the load may leave), but rarely
        assert extra <= 1.5 * PROBE_SHARE * len(picks) * cost[1], extra
    finally:
        torch.set_num_threads(before)


def test_thread_policy_reads_no_load_change_from_calls_of_another_size():
    """A byte-level member mixes one-row steps with 16-row tree forwards (2-3x the seconds): read as
    load arriving, each would bring a probe of the other count, which under a competitor costs 15-35x."""
    before = torch.get_num_threads()
    policy = ThreadPolicy("auto")
    policy.candidates = [2, 1]
    cost = {(2, 1): 35.0, (1, 1): 1.0, (2, 16): 40.0, (1, 16): 2.5}
    try:
        picks = []
        for call in range(2000):
            size = 16 if call % 3 == 0 else 1
            t = policy.choose(("m",))
            picks.append(t)
            policy.observe(("m",), t, cost[t, size], size)
        assert picks[2:].count(2) <= 3, picks[2:].count(2)
    finally:
        torch.set_num_threads(before)


class _Flip:
    """A BusyWatch stand-in that reports a change of load when told to."""

    def __init__(self) -> None:
        self.pending = False

    def changed(self) -> bool:
        flipped, self.pending = self.pending, False
        return flipped


def test_thread_policy_returns_to_all_cores_when_the_load_leaves():
    """A single thread's time barely moves when a competitor leaves, so probes alone would keep the
    policy on 1 thread for up to LAST_PROBE calls; the machine watch makes it re-measure at once."""
    before = torch.get_num_threads()
    watch = _Flip()
    policy = ThreadPolicy("auto", watch=watch)
    policy.candidates = [2, 1]
    run = lambda cost, n: [policy.observe(("m", 1), t, cost[t]) or t for t in
                           (policy.choose(("m", 1)) for _ in range(n))]
    try:
        assert run({2: 3.2, 1: 2.0}, 200)[-50:].count(1) >= 48  # busy a long time: 1 thread, rare probes
        watch.pending = True  # the competitor leaves
        assert run({2: 1.0, 1: 1.9}, 10)[2:7] == [2] * 5  # both counts re-measured, then all cores
    finally:
        torch.set_num_threads(before)


def test_busy_watch_reports_a_competitor_arriving():
    import subprocess
    import sys
    import time

    from cos.machine import BusyWatch

    watch = BusyWatch(interval=0.6)
    time.sleep(0.7)
    quiet_first = not watch.changed() and watch.busy is False  # assumes nothing else spins right now
    spinner = subprocess.Popen([sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 2.5: pass"])
    try:
        time.sleep(1.0)
        flipped = watch.changed()
    finally:
        spinner.wait()
    if not quiet_first:
        pytest.skip("the machine was busy before the competitor started")
    assert flipped and watch.busy


def test_thread_count_does_not_change_logits(models):
    """What makes the auto policy safe: a forward computes the same numbers with 1 or 2 threads."""
    before = torch.get_num_threads()
    x = torch.tensor([PROMPT * 6])
    outs = []
    try:
        for t in (1, 2):
            torch.set_num_threads(t)
            with torch.inference_mode():
                outs.append(models["base"](input_ids=x).logits)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(outs[0], outs[1])


# ----------------------------------------------------------------- schedule
def test_expected_tokens():
    assert expected_tokens(0.5, 3, 0) == pytest.approx(1 + 0.5 + 0.25)
    assert expected_tokens(0.5, 3, 1) == pytest.approx(1 + 0.5 + 0.25 + 0.125)
    assert expected_tokens(1.0, 4, 1) == 5


def test_best_length_follows_the_costs():
    flat = lambda n: 1.0  # a verify pass costs one step whatever its length (memory-bound)
    assert best_length(0.9, 5, 1, draft_step=0.2, verify=flat, standard=1.2) == 5
    assert best_length(0.1, 5, 0, draft_step=0.9, verify=flat, standard=1.9) == 0  # nothing accepted: standard
    steep = lambda n: 1.0 + 0.6 * (n - 1)  # bf16 without native support: blocks cost ~linearly more
    assert best_length(0.7, 5, 1, draft_step=0.37, verify=steep, standard=1.37) == 1
    # Cor. 3.7: with γ = 1 and a bonus, speculation never loses, (1+c)/(1+c(1-α)) >= 1; equal at α = 0
    assert best_length(0.2, 1, 1, draft_step=1.0, verify=flat, standard=2.0) == 1
    assert best_length(0.0, 1, 1, draft_step=1.0, verify=flat, standard=2.0) == 0  # a tie: the standard round


def test_schedule_fixed_always_gamma_adaptive_measures_then_chooses():
    costs = CallCosts()
    assert costs(1) is None
    costs.observe(1, 0.1)
    costs.observe(6, 0.5)
    assert costs(1) == 0.1 and costs(4) == 0.1 and costs(9) == 0.5
    fixed = Schedule("fixed", 5, 1)
    assert [fixed.length(costs, [costs], True) for _ in range(20)] == [5] * 20
    adaptive = Schedule("adaptive", 5, 0)  # no bonus (Naive-CoS): with one, k = 1 never loses (Cor. 3.7)
    verifier = CallCosts({1: 1.0, 2: 1.1, 3: 1.2, 4: 1.3, 5: 1.4, 6: 1.5})
    drafter = CallCosts({1: 0.3})
    first = [adaptive.length(drafter, [verifier], True) for _ in range(3)]
    assert first == [5, 0, 1]  # measure the plan, a standard round, the shortest draft
    for _ in range(20):
        adaptive.observe(5, 0)  # nothing accepted
    assert adaptive.alpha < 0.1
    assert adaptive.length(drafter, [verifier], True) == 0
    # probes revisit a neighbour of the choice only: k = 0 -> 1, never a far-off length
    chosen = [adaptive.length(drafter, [verifier], True) for _ in range(4 * PROBE_EVERY)]
    assert set(chosen) == {0, 1} and chosen.count(1) == 4
    with pytest.raises(ValueError, match="unknown schedule"):
        Schedule("greedy", 5, 1)


def test_schedule_alpha_counts_only_drafts_that_were_tested():
    """A round stops at its first rejection: the drafts after it say nothing about α. Rounds of 5 drafts
    accepted independently at 0.9 must read as 0.9 (accepted / drafted would read about 0.74)."""
    generator = torch.Generator().manual_seed(0)
    schedule = Schedule("adaptive", 5, 1)
    for _ in range(4000):
        accepted = torch.rand(5, generator=generator) < 0.9
        schedule.observe(5, int(accepted.cumprod(0).sum()))
    assert schedule.alpha == pytest.approx(0.9, abs=0.01)  # sd of the estimate ~0.003 here
    assert schedule.accepted / schedule.drafted < 0.8


def test_schedule_counts_acceptance_by_depth_and_fills_unseen_depths_from_the_one_above():
    """alphas[i]: the chance the (i+1)-th draft of a round is accepted once the i before it were. Rounds
    whose first draft passes at 0.9 and whose second at 0.5 read as such, not as a pooled 0.64 that
    overrates long rounds; depths no round reached read as the deepest one measured."""
    schedule = Schedule("adaptive", 5, 1)
    assert schedule.alphas() == pytest.approx([0.5] * 5)  # nothing seen: the prior at every depth
    generator = torch.Generator().manual_seed(0)
    for _ in range(4000):
        first, second = (torch.rand(2, generator=generator) < torch.tensor([0.9, 0.5])).tolist()
        schedule.observe(2, 0 if not first else 1 if not second else 2)
    alphas = schedule.alphas()
    assert alphas[0] == pytest.approx(0.9, abs=0.015) and alphas[1] == pytest.approx(0.5, abs=0.03)
    assert alphas[2:] == pytest.approx([alphas[1]] * 3)
    assert schedule.alpha == pytest.approx((0.9 + 0.45) / (1 + 0.9), abs=0.02)  # pooled: accepted / tested
    before = [list(depth) for depth in schedule.depths]
    schedule.observe_chance(0.25)  # evidence without a draft counts where a round's first draft would be
    assert schedule.depths[0] == pytest.approx([before[0][0] + 0.25, before[0][1] + 1])
    assert schedule.depths[1:] == before[1:]


def test_schedule_continuation_after_a_bonus_follows_the_measured_costs():
    """What CoS asks before a member drafts more after its bonus (pending, a free draft): None (drop the
    chain, a standard round next) only where the measured costs make a standard round beat every chain
    (a block of n costs n steps: torch's bf16 GEMM on AVX2); else the count the §6 model finds fastest."""
    steep = CallCosts({n: 1.0 * n for n in range(1, 8)})
    flat = CallCosts({n: 1.0 for n in range(1, 8)})
    drafter = CallCosts({n: 0.3 * n for n in range(1, 8)})
    schedule = Schedule("adaptive", 5, 1)
    assert schedule.continuation(drafter, [steep], True, 4) == 4  # the first measurements not done
    for _ in range(3):
        schedule.length(drafter, [steep], True)
    for _ in range(20):
        schedule.observe(5, 1)  # α 0.5

    def fastest_by_hand(alpha: float, most: int) -> int:  # chain of 1 + j: (1 - α^(j+2)) / (1 - α) for j·0.3 + 1
        return max(range(most + 1), key=lambda j: ((1 - alpha ** (j + 2)) / (1 - alpha) / (0.3 * j + 1.0), -j))

    assert schedule.continuation(drafter, [steep], True, 4) is None
    assert schedule.continuation(drafter, [flat], True, 4) == fastest_by_hand(schedule.alpha, 4) == 0
    for _ in range(400):
        schedule.observe(5, 5)  # α -> 0.97
    assert schedule.continuation(drafter, [flat], True, 4) == fastest_by_hand(schedule.alpha, 4) == 4
    assert schedule.continuation(drafter, [flat], True, 2) == 2 and schedule.continuation(drafter, [flat], True, 0) == 0
    assert Schedule("fixed", 5, 1).continuation(drafter, [steep], True, 4) == 4


def test_cos_dropping_or_shortening_its_chain_stays_greedy_exact(models, monkeypatch):
    """After a bonus, CoS drafts as many more as the schedule says, or drops the pending proposals
    unverified (forced here from past counts alone, conftest.PastDependentSchedule): output still equals
    the reference, and drops, short and full continuations all happened."""
    pair = [models["base"], models["close"]]  # close relatives: rounds accept, so step 4 is reached
    combination = make_combination("cd", 2)
    ref = reference_generate(pair, combination, PROMPT, 48, SamplingParams(0))
    asked = []
    continuation = PastDependentSchedule.continuation
    monkeypatch.setattr(PastDependentSchedule, "continuation",
                        lambda self, *a: asked.append((a[-1], continuation(self, *a))) or asked[-1][1])
    engine = force_every_length(Engine(members(*pair), make_plan("cd_chef", 2, combination, [2, 3], schedule="adaptive")))
    for _ in range(2):
        assert engine.generate(PROMPT, max_new_tokens=48, temperature=0, eos_token_ids=[]).tokens == ref
    answers = {answer for _, answer in asked}
    assert None in answers and 0 in answers and (2, 2) in asked


def test_adaptive_schedule_is_exact_greedy_and_refused_for_standard_methods(models):
    pair = [models["base"], models["stranger"]]
    combination = make_combination("cd", 2)
    ref = reference_generate(pair, combination, PROMPT, 48, SamplingParams(0))
    for method, gamma in (("cd_sd", 5), ("cd_chef", [1, 5])):
        engine = Engine(members(*pair), make_plan(method, 2, combination, gamma, 1 if method == "cd_sd" else None,
                                                  schedule="adaptive"), threads="auto")
        for _ in range(3):  # the schedule learns across requests; every request equals the reference
            out = engine.generate(PROMPT, max_new_tokens=48, temperature=0, eos_token_ids=[])
            assert out.tokens == ref, method
        assert out.stats.schedule == "adaptive"
    with pytest.raises(ValueError, match="drafts nothing"):
        make_plan("cd", 2, combination, schedule="adaptive")


# ----------------------------------------------------------------- machine load
def test_load_meter_sees_a_competitor():
    import subprocess
    import sys
    import time

    from cos.machine import Load, LoadMeter

    spinner = subprocess.Popen([sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 3: pass"])
    try:
        time.sleep(0.3)
        meter = LoadMeter()
        time.sleep(1.5)
        load = meter.stop()
    finally:
        spinner.wait()
    assert load.others_cores is not None and load.others_cores > 0.5  # the spinner holds about one core
    assert load.busy and load.warning().startswith("timings unreliable: load")
    quiet = Load(cores=2, loadavg_before=0.1, loadavg_after=0.2, others_cores=0.05)
    assert not quiet.busy and quiet.warning() is None
    assert Load(cores=2, loadavg_before=2.4, loadavg_after=3.0, others_cores=None).busy


@pytest.mark.slow
def test_compiled_static_member_is_exact_and_compiles_in_warm_up(models):
    """torch.compile over a static cache (CUDA graphs on CUDA; inductor here): warm-up compiles every
    length the method uses, then generation equals the reference and compiles nothing more."""
    pair = [models["base"], models["close"]]
    combination = make_combination("we", 2)
    ref = reference_generate(pair, combination, PROMPT, 24, SamplingParams(0))
    ms = [Member(m, name=f"c{i}", cache="static", capacity=128, compile=True) for i, m in enumerate(pair)]
    engine = Engine(ms, make_plan("we_chef", 2, combination, [1, 3]))
    for m in ms:
        assert m.warm_up(range(1, 6)) > 0 and m.compile_seconds > 0
    out = engine.generate(PROMPT, max_new_tokens=24, temperature=0, eos_token_ids=[])
    assert out.tokens == ref
    with pytest.raises(ValueError, match="compile=True needs fixed shapes"):
        Member(models["base"], compile=True)


def test_static_capacity_bounds_the_generation(models):
    ms = [Member(m, name=f"s{i}", cache="static", capacity=96) for i, m in enumerate((models["base"], models["close"]))]
    engine = Engine(ms, make_plan("we_chef", 2, make_combination("we", 2), [1, 5]))
    out = engine.generate(PROMPT, max_new_tokens=500, temperature=0, eos_token_ids=[])
    assert len(out.tokens) == 96 - 7 - len(PROMPT)  # capacity - (max γ + 2) - prompt: room for drafts and bonus
