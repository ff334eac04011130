"""Draft trees (docs/algorithm.md §4.6): the member's tree forward and compaction, bitwise rows, and
greedy exactness of every tree method against the naive reference. Sampling: test_tree_sampling.py;
the acceptance walk alone: test_tree_acceptance.py."""

from __future__ import annotations

import random

import pytest
import torch

from conftest import bits, engine_on, members
from greedy_check import assert_same_greedy
from cos import Engine, make_combination, make_plan
from cos.member import Member
from cos.methods.reference import reference_generate
from cos.plan import default_schedule
from cos.sampling import SamplingParams
from cos.tree import ROOT, DraftTree
from cos.tree_draft import TreeShape, lookup_continuation, propose_tree

PROMPT = [3, 17, 42, 8, 23]
GREEDY = SamplingParams(temperature=0)


def random_tree(rng: random.Random, nodes: int, vocab: int = 64) -> DraftTree:
    tree = DraftTree()
    for _ in range(nodes):
        tree.add(rng.randrange(vocab), rng.choice([ROOT, *range(len(tree))]))
    return tree


def fresh(model, tokens: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return model(input_ids=torch.tensor([tokens])).logits[0, -1]


# ----------------------------------------------------------------- the member's tree forward
@pytest.mark.parametrize("cache", ["dynamic", "preallocated", "static"])
def test_tree_rows_and_compaction_equal_fresh_forwards(models, cache):
    """Each node's row is the row after its path; after accepting a path (compaction) and going on with
    chains and more trees, every row still equals a fresh forward over the same tokens (the KV invariant)."""
    model = models["base"]
    member = Member(model, cache=cache, capacity=256 if cache != "preallocated" else 4)  # 4: buffers grow too
    rng = random.Random(3)
    seq = list(PROMPT)
    member.prefill(torch.tensor(seq))
    for round_ in range(12):
        tree = random_tree(rng, rng.randint(1, 12))
        rows = member.score_tree(torch.tensor(seq), tree, root=True)
        assert rows.shape[0] == len(tree) + 1
        assert torch.allclose(rows[0], fresh(model, seq), atol=1e-4)
        for i in range(len(tree)):
            assert torch.allclose(rows[i + 1], fresh(model, seq + tree.path_tokens(i)), atol=1e-4), (round_, i)
        leaf = rng.randrange(len(tree))
        path = tree.path(leaf)[: rng.randint(0, tree.depths[leaf])]
        member.accept_tree(path)
        seq += [tree.tokens[i] for i in path]
        assert member.n_cached == len(seq) and int(member.cache.get_seq_length()) == len(seq)
        seq += [rng.randrange(64)]  # a residual or bonus: fed by the next call, a chain step this time
        if rng.random() < 0.5:
            assert torch.allclose(member.score(torch.tensor(seq), 1)[0], fresh(model, seq), atol=1e-4)


def test_tree_grown_level_by_level_equals_one_forward(models):
    """A proposer feeds its tree a level at a time (root=False): the same rows as one forward."""
    model = models["base"]
    member = Member(model)
    member.prefill(torch.tensor(PROMPT))
    tree = DraftTree()
    member.score(torch.tensor(PROMPT), 1)
    got = []
    for parent_level in ([ROOT, ROOT], [0, 0, 1], [3, 4]):
        for p in parent_level:
            tree.add(len(tree) * 7 % 64, p)
        got.append(member.score_tree(torch.tensor(PROMPT), tree, root=False))
    assert member.score_tree(torch.tensor(PROMPT), tree, root=False).shape[0] == 0  # nothing new
    got = torch.cat(got)
    for i in range(len(tree)):
        assert torch.allclose(got[i], fresh(model, PROMPT + tree.path_tokens(i)), atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_tree_rows_bitwise_equal_one_token_steps(ext, dtype):
    """With the row kernels a node's logits are bitwise those of one-token steps along its path, and so
    are the rows after compaction: trees keep greedy CoS token for token in bf16."""
    from test_row_invariance import tiny

    model = tiny("qwen2", dtype)
    rng = random.Random(5)
    seq = torch.randint(0, 300, (20,), generator=torch.Generator().manual_seed(2)).tolist()
    tree_member, step_member = Member(model), Member(model)
    tree_member.prefill(torch.tensor(seq))
    step_member.prefill(torch.tensor(seq))  # the same prefill: prompt caches are shared by every method
    agreed = len(seq) - 1  # what the step member holds of seq (it last stepped along another path)
    for _ in range(4):
        tree = random_tree(rng, 15, vocab=300)
        rows = tree_member.score_tree(torch.tensor(seq), tree, root=True)
        for i in [ROOT, *range(len(tree))]:
            path = [] if i == ROOT else tree.path_tokens(i)
            step_member.rollback(agreed)
            for j in range(len(path) + 1):  # one-token steps along the path
                step = step_member.score(torch.tensor(seq + path[:j]), 1)[0]
            assert torch.equal(bits(rows[i + 1]), bits(step)), f"node {i} differs from a one-token step"
            agreed = len(seq) - 1
        path = tree.path(rng.randrange(len(tree)))
        tree_member.accept_tree(path)
        seq += [tree.tokens[i] for i in path] + [rng.randrange(300)]


# ----------------------------------------------------------------- greedy exactness of the tree methods
TREES = {"chain": {"nodes": 4, "width": 1}, "w2": {"nodes": 8, "width": 2}, "w4": {"nodes": 15, "width": 4},
         "lookup": {"nodes": 6, "width": 2, "lookup": 4}, "flat_lookup": {"nodes": 2, "width": 2, "lookup": 3}}
METHODS = [("sd", "none", 2), ("we_sd", "none", 2), ("we_sd", "exact", 2), ("cd_sd", "exact", 2),
           ("we_chef", "none", 2), ("cd_chef", "none", 2), ("we_sd", "exact", 3), ("we_chef", "none", 3)]
REGIMES = {"all_accepted": "twin", "partial": "close", "nothing_accepted": "stranger"}
_references: dict = {}


@pytest.mark.parametrize("cache", ["dynamic", "preallocated", "static"])
@pytest.mark.parametrize("tree", TREES)
@pytest.mark.parametrize("method,bonus,n", METHODS, ids=[f"{m}-{b}-{n}" for m, b, n in METHODS])
@pytest.mark.parametrize("regime", REGIMES)
def test_tree_methods_equal_the_reference_greedy(models, method, bonus, n, tree, cache, regime):
    order = [models["base"], models[REGIMES[regime]], models["third"]][:n]
    kind = method.split("_")[0]
    settings = {"alpha": 0.3} if kind == "cd" else {"weights": [0.5, 0.3, 0.2]} if n == 3 else {}
    combination = None if method == "sd" else make_combination(kind, n, **settings)
    plan = make_plan(method, n, combination, 4, None, bonus, tree=TREES[tree])
    in_r = order[:1] if method == "sd" else order  # sd: r is the target's alone
    key = (regime, method == "sd", n, repr(plan.combination))
    if key not in _references:
        _references[key] = reference_generate(in_r, plan.combination, PROMPT, 48, GREEDY)
    out = engine_on(cache, order, plan).generate(PROMPT, max_new_tokens=48, temperature=0, eos_token_ids=[])
    assert_same_greedy(out.tokens, _references[key], PROMPT, in_r, plan.combination)
    assert out.stats.drafted > 0
    if regime == "all_accepted" and kind != "cd" and n == 2:  # a twin proposer: argmax r is its own
        assert out.stats.accepted >= out.stats.rounds


AUTO = {"nodes": 4, "width": 2, "auto": True}


@pytest.mark.parametrize("method,bonus,n", METHODS, ids=[f"{m}-{b}-{n}" for m, b, n in METHODS])
@pytest.mark.parametrize("regime", ["all_accepted", "partial"])
def test_tree_auto_equals_the_reference_greedy(models, method, bonus, n, regime):
    """tree: auto, chain rounds (every length, standard rounds too) and tree rounds taking turns wherever
    nothing is carried: the standard method's tokens, and both kinds ran."""
    order = [models["base"], models[REGIMES[regime]], models["third"]][:n]
    kind = method.split("_")[0]
    settings = {"alpha": 0.3} if kind == "cd" else {"weights": [0.5, 0.3, 0.2]} if n == 3 else {}
    combination = None if method == "sd" else make_combination(kind, n, **settings)
    plan = make_plan(method, n, combination, 4, None, bonus, schedule="adaptive", tree=AUTO)
    in_r = order[:1] if method == "sd" else order
    reference = reference_generate(in_r, plan.combination, PROMPT, 48, GREEDY)
    out = engine_on("varied", order, plan).generate(PROMPT, max_new_tokens=48, temperature=0, eos_token_ids=[])
    assert_same_greedy(out.tokens, reference, PROMPT, in_r, plan.combination)
    assert min(out.stats.round_kinds.values()) > 0 and out.stats.tree.startswith("auto"), out.stats


def test_a_wider_tree_accepts_more_per_round(models):
    """The point of trees: with a partly agreeing proposer, a width-4 tree of the chain's depth gets more
    tokens per round than the chain."""
    order = [models["base"], models["close"]]
    per_round = {}
    for name, shape in {"chain": {"nodes": 4, "width": 1}, "tree": {"nodes": 15, "width": 4}}.items():
        plan = make_plan("we_sd", 2, make_combination("we", 2), 4, None, "exact", tree=shape)
        out = Engine(members(*order), plan).generate(PROMPT, max_new_tokens=64, temperature=0, eos_token_ids=[])
        per_round[name] = out.stats.accepted / out.stats.rounds
    assert per_round["tree"] > per_round["chain"], per_round


# ----------------------------------------------------------------- configuration
def test_tree_configuration_errors_name_the_fix():
    we = make_combination("we", 2)
    with pytest.raises(ValueError, match="drafts no tree: tree applies to sd, we_sd"):
        make_plan("we", 2, we, 1, tree={"nodes": 4, "width": 2})
    with pytest.raises(ValueError, match="at most 16 rows"):
        make_plan("we_sd", 2, we, 4, tree={"nodes": 16, "width": 2})
    with pytest.raises(ValueError, match="tree width must be an int in 1..nodes"):
        make_plan("we_sd", 2, we, 4, tree={"nodes": 4, "width": 5})
    with pytest.raises(ValueError, match=r"tree must be none, auto, \{nodes: N, width: W, lookup: L, children: "
                                         r"distinct\|iid\} or NxW\+L:iid"):
        make_plan("we_sd", 2, we, 4, tree={"depth": 3})
    with pytest.raises(ValueError, match="tree children must be one of distinct, iid"):
        make_plan("we_sd", 2, we, 4, tree="7x2:unique")
    with pytest.raises(ValueError, match="use schedule=fixed with a tree"):
        make_plan("we_sd", 2, we, 4, schedule="adaptive", tree={"nodes": 4, "width": 2})
    with pytest.raises(ValueError, match="draft_threshold"):
        make_plan("we_sd", 2, we, 4, draft_threshold=0.5, tree={"nodes": 4, "width": 2})
    with pytest.raises(ValueError, match="only the default proposer drafts a tree"):
        make_plan("we_chef", 2, we, [2, 5], tree={"nodes": 4, "width": 2})
    assert make_plan("we_sd", 2, we, 4, tree="none").tree is None
    assert make_plan("we_sd", 2, we, 4, tree={"nodes": 6, "width": 3}).tree == TreeShape(6, 3)
    assert TreeShape(6, 3).depth == 2 and TreeShape(7, 3).depth == 3 and TreeShape(7, 3).level_size(2) == 1
    assert make_plan("we_sd", 2, we, 4, tree="7x2+3").tree == TreeShape(7, 2, 3)
    assert make_plan("we_sd", 2, we, 4, tree={"nodes": 7, "width": 2, "lookup": 3}).tree == TreeShape(7, 2, 3)
    assert make_plan("we_sd", 2, we, 4, tree="7x2+3:iid").tree == TreeShape(7, 2, 3, "iid")
    assert make_plan("we_sd", 2, we, 4, tree={"nodes": 7, "width": 2, "children": "iid"}).tree.children == "iid"
    assert TreeShape(7, 2).children == "distinct"
    with pytest.raises(ValueError, match=r"tree lookup must be an int in 0..3 \(nodes \+ lookup <= 15"):
        make_plan("we_sd", 2, we, 4, tree="12x3+4")
    # auto: a chain round (its length from the adaptive schedule) or a tree round, whichever measures faster
    assert make_plan("we_sd", 2, we, 4, schedule="adaptive", tree="auto").tree == TreeShape(7, 2, auto=True)
    assert make_plan("we_sd", 2, we, 4, tree={"nodes": 4, "width": 2, "auto": True}).tree.auto
    with pytest.raises(ValueError, match="tree auto must be true or false"):
        make_plan("we_sd", 2, we, 4, tree={"nodes": 4, "width": 2, "auto": "yes"})
    assert [default_schedule(t) for t in (None, "none", "auto", "7x2")] == ["adaptive", "adaptive", "adaptive", "fixed"]


def test_sampled_children_are_drawn_without_replacement_unless_iid():
    """distinct (the default): a node's k-th child is drawn from q without its earlier children,
    renormalised, and that row is the k-th trial's q (recursive rejection sampling), so no slot holds a
    duplicate; iid: every sibling is a trial on q itself, and a token drawn twice is one node, two trials."""
    from table_member import TableMember

    member, params, seq = TableMember(seed=3, vocab=5, scale=1.0, name="m"), SamplingParams(1.0), torch.tensor([1, 2])
    q = torch.softmax(member.logits_at(seq, torch.tensor([2]))[0].float(), -1)
    duplicates = 0
    for seed in range(20):
        generator = torch.Generator().manual_seed(seed)
        draft = propose_tree(member, seq, TreeShape(4, 4), params, generator)
        trials, tokens = draft.trials[0], [draft.tree.tokens[node] for node, _ in draft.trials[0]]
        assert len(set(tokens)) == len(tokens) == 4 and [row for _, row in trials] == [0, 1, 2, 3]
        for k, (_, row) in enumerate(trials):
            expected = q.clone()
            expected[tokens[:k]] = 0
            assert torch.allclose(draft.q[row], expected / expected.sum(), atol=1e-6)
        iid = propose_tree(member, seq, TreeShape(4, 4, children="iid"), params, torch.Generator().manual_seed(seed))
        assert [row for _, row in iid.trials[0]] == [0] * 4 and torch.allclose(iid.q[0], q, atol=1e-6)
        duplicates += len(iid.tree) < 4
    assert duplicates > 0  # the i.i.d. draws repeat a token in some seeds: the case `distinct` avoids


def test_lookup_copies_what_followed_the_latest_match():
    assert lookup_continuation([1, 2, 3, 9, 1, 2, 3, 7, 5, 1, 2, 3], 3) == [7, 5, 1]  # the latest match, n = 3
    assert lookup_continuation([4, 2, 3, 9, 8, 2, 3], 5) == [9, 8, 2, 3]  # n = 2; cut at the end of the context
    assert lookup_continuation([1, 2, 3, 4], 3) == []  # nothing repeats
    assert lookup_continuation([5], 3) == []


def test_the_lookup_branch_is_free_tokens_on_a_repeating_text():
    """Table members' greedy text is periodic (their logits depend on the previous token and the position
    mod 3): the copied branch is accepted where the proposer is not, so a tree with it emits more per round
    than the same tree without it, with the same output."""
    from table_member import TableMember

    per_round, outputs = {}, {}
    for lookup in (0, 4):
        pair = [TableMember(seed=1, vocab=16, name="target"), TableMember(seed=2, vocab=16, name="stranger")]
        plan = make_plan("we_sd", 2, make_combination("we", 2, lam=0.0), 4, 1, "exact",
                         tree={"nodes": 4, "width": 2, "lookup": lookup})
        out = Engine(pair, plan).generate([1, 2, 3], max_new_tokens=48, temperature=0, eos_token_ids=[])
        per_round[lookup], outputs[lookup] = out.stats.accepted / out.stats.rounds, out.tokens
    assert outputs[0] == outputs[4] and per_round[4] > per_round[0] + 0.5, per_round
