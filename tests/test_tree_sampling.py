"""Sampling exactness of the tree methods, Monte Carlo (the bound and the enumeration of
test_sampling_exact.py): the first 3 emitted tokens of sd, Naive-CoS (both bonus modes) and CoS with n =
2 and 3, drafting trees whose siblings are drawn without replacement (the default: recursive rejection
sampling) or i.i.d. (`:iid` cases, duplicates included), are distributed as token-by-token sampling from
r, also where top-k leaves a node fewer tokens than its share of draws. The negative control (a rejected
sibling's successor tried against r instead of the updated residual) must exceed the same bound."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow

from cos import Engine, SamplingParams, make_plan
from cos import acceptance_tree
from conftest import force_every_length
from table_member import TableMember
from test_sampling_exact import THRESHOLD, VOCAB, exact_distribution, l1_distance, table_combination

CASES = {  # method, members, bonus, tree
    "sd_w2": ("sd", 2, "none", {"nodes": 4, "width": 2}),
    "naive_none_w3": ("we_sd", 2, "none", {"nodes": 6, "width": 3}),
    "naive_exact_w2": ("we_sd", 2, "exact", {"nodes": 4, "width": 2}),
    "cd_naive_exact_w2": ("cd_sd", 2, "exact", {"nodes": 5, "width": 2}),
    "cos_2_w2": ("we_chef", 2, "none", {"nodes": 4, "width": 2}),
    "cd_cos_2_w3": ("cd_chef", 2, "none", {"nodes": 3, "width": 3}),
    "cos_3_w2": ("we_chef", 3, "none", {"nodes": 4, "width": 2}),
    "sd_lookup": ("sd", 2, "none", {"nodes": 1, "width": 1, "lookup": 3}),
    "naive_exact_lookup": ("we_sd", 2, "exact", {"nodes": 4, "width": 2, "lookup": 2}),
    "cos_2_lookup": ("we_chef", 2, "none", {"nodes": 2, "width": 2, "lookup": 2}),
    "naive_none_w3_iid": ("we_sd", 2, "none", {"nodes": 6, "width": 3, "children": "iid"}),
    "cos_2_w2_iid": ("we_chef", 2, "none", {"nodes": 4, "width": 2, "children": "iid"}),
    "naive_exact_lookup_iid": ("we_sd", 2, "exact", {"nodes": 4, "width": 2, "lookup": 2, "children": "iid"}),
    # tree: auto, chain and tree rounds taking turns (forced, every chain length) wherever nothing is carried
    "naive_exact_auto": ("we_sd", 2, "exact", {"nodes": 4, "width": 2, "auto": True}),
    "cos_2_auto": ("we_chef", 2, "none", {"nodes": 4, "width": 2, "auto": True}),
}


def build(case: str, params: SamplingParams = SamplingParams(1.0)):
    method, n, bonus, tree = CASES[case]
    members = [TableMember(seed=10 + i, vocab=VOCAB, scale=1.0, name=f"m{i}") for i in range(n)]
    plan = make_plan(method, n, table_combination(method, n), 2, None, bonus, tree=tree)
    engine = Engine(members, plan)
    if plan.tree.auto:
        force_every_length(engine)
    in_r = members[:1] if method == "sd" else members
    return engine, exact_distribution(in_r, plan.combination, params)


@pytest.mark.parametrize("case", CASES)
def test_tree_emitted_distribution_is_r(case):
    engine, exact = build(case)
    distance = l1_distance(engine, exact, 1.0)
    assert distance < THRESHOLD, f"{case}: L1 {distance:.4f} >= {THRESHOLD:.4f}"
    assert engine.last.stats.drafted > 0
    if engine.kinds is not None:
        assert all(engine.kinds.runs.values()), engine.kinds.runs


def test_distinct_children_exhausting_top_k_stay_exact():
    """top-k 2 and three draws per node: the third has no mass left, so the node stops drawing (a choice
    from its earlier draws only); the walk then falls back to the residual. Still r."""
    params = SamplingParams(0.7, top_k=2)
    engine, exact = build("naive_none_w3", params)
    distance = l1_distance(engine, exact, 0.7, top_k=2)
    assert distance < THRESHOLD, f"L1 {distance:.4f} >= {THRESHOLD:.4f}"


@pytest.mark.parametrize("case", ["naive_none_w3", "cos_2_w2", "naive_exact_lookup", "naive_none_w3_iid"])
def test_tree_negative_control_is_rejected(case, monkeypatch):
    monkeypatch.setattr(acceptance_tree, "residual_distribution", lambda r, q: r)
    engine, exact = build(case)
    distance = l1_distance(engine, exact, 1.0)
    assert distance >= THRESHOLD, f"the test cannot tell a sibling tried against r apart (L1 {distance:.4f})"
