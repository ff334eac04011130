"""The acceptance rule, three ways (CONTRIBUTING.md §10): closed form, deterministic tables, seeded checks."""

from __future__ import annotations

import torch

from cos.acceptance import NO_TOKEN, residual_distribution, verify_block

NEG = float("-inf")


def emitted(r: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Exact distribution of the token emitted for one draft x ~ q under the rule (no sampling):
    P(y) = q(y) min(1, r(y)/q(y)) + P(reject) · residual(y), with the code's residual."""
    accept = torch.where(q > 0, torch.minimum(torch.ones_like(q), r / q.clamp_min(1e-30)), torch.zeros_like(q))
    p_reject = (q * (1 - accept)).sum()
    return q * accept + p_reject * residual_distribution(r, q)


def test_closed_form_emits_exactly_r():
    cases = [
        ([0.5, 0.3, 0.2, 0.0], [0.1, 0.1, 0.4, 0.4]),
        ([1.0, 0.0, 0.0, 0.0], [0.0, 0.5, 0.5, 0.0]),  # disjoint supports: never accept
        ([0.0, 0.0, 0.5, 0.5], [0.0, 0.0, 0.5, 0.5]),  # equal: always accept
        ([0.25, 0.25, 0.25, 0.25], [0.97, 0.01, 0.01, 0.01]),
    ]
    for r, q in cases:
        r, q = torch.tensor(r, dtype=torch.float64), torch.tensor(q, dtype=torch.float64)
        assert torch.allclose(emitted(r, q), r, atol=1e-12), (r, q)


def test_closed_form_on_random_pairs():
    gen = torch.Generator().manual_seed(0)
    for _ in range(200):
        r = torch.rand(16, generator=gen, dtype=torch.float64) ** 4
        q = torch.rand(16, generator=gen, dtype=torch.float64) ** 4
        q[torch.rand(16, generator=gen) < 0.3] = 0  # holes in q's support
        r, q = r / r.sum(), q / q.sum()
        assert torch.allclose(emitted(r, q), r, atol=1e-12)
        assert abs((1 - emitted(r, q)).sum()) >= 0  # sanity: a distribution
        assert torch.isclose(torch.minimum(q, r).sum(), (q * torch.clamp(r / q.clamp_min(1e-30), max=1)).sum())


def probs(*rows):
    return torch.tensor(rows, dtype=torch.float32).softmax(-1)


def test_table_sampling_forced_accepts_and_rejects():
    # position 0: r puts all mass on token 1, q drew token 1 -> accept for sure
    # position 1: r gives token 2 zero mass (-inf), q drew 2 -> reject for sure; residual = r - q
    #             restricted to where r > q: only token 3 here
    q = probs([NEG, 10, NEG, NEG], [NEG, NEG, 10, NEG], [10, NEG, NEG, NEG])
    r = probs([NEG, 10, NEG, NEG], [NEG, NEG, NEG, 10], [10, NEG, NEG, NEG])
    for seed in range(20):
        n, nxt = verify_block(torch.tensor([1, 2, 0]), q, r, False, torch.Generator().manual_seed(seed))
        assert (int(n), int(nxt)) == (1, 3)


def test_table_sampling_full_accept_with_and_without_bonus_row():
    q = probs([10, NEG, NEG], [NEG, 10, NEG])
    r = probs([10, NEG, NEG], [NEG, 10, NEG], [NEG, NEG, 10])  # third row: bonus position
    n, nxt = verify_block(torch.tensor([0, 1]), q, r, False, torch.Generator().manual_seed(0))
    assert (int(n), int(nxt)) == (2, 2)
    n, nxt = verify_block(torch.tensor([0, 1]), q, r[:2], False, torch.Generator().manual_seed(0))
    assert (int(n), int(nxt)) == (2, NO_TOKEN)


def test_table_greedy():
    r = probs([1, 9, 2], [5, 1, 0], [0, 0, 3])
    cases = [([1, 0], 2, 2), ([1, 1], 1, 0), ([0, 0], 0, 1)]
    for draft, n_expected, next_expected in cases:
        n, nxt = verify_block(torch.tensor(draft), None, r, True, None)
        assert (int(n), int(nxt)) == (n_expected, next_expected), draft
    n, nxt = verify_block(torch.tensor([1, 0]), None, r[:2], True, None)
    assert (int(n), int(nxt)) == (2, NO_TOKEN)


def test_acceptance_threshold_is_min_one_ratio():
    """White box: with the generator replayed, accept iff u·q(x) < r(x), i.e. P = min(1, r/q)."""
    q = probs([2, 1, 0, -1], [0, 0, 3, 0], [1, 1, 1, 1])
    r = probs([0, 2, 0, 0], [0, 0, 1, 2], [3, 0, 0, 0])
    draft = torch.tensor([0, 2, 1])
    for seed in range(50):
        u = torch.rand(3, generator=torch.Generator().manual_seed(seed))
        ok = u * q[torch.arange(3), draft] < r[torch.arange(3), draft]
        expected = int(ok.long().cumprod(0).sum())
        n, _ = verify_block(draft, q, r, False, torch.Generator().manual_seed(seed))
        assert int(n) == expected


def test_same_seed_same_verdict_and_no_global_rng():
    q = probs([0, 1, 2, 3], [3, 2, 1, 0])
    r = probs([3, 2, 1, 0], [0, 1, 2, 3])
    torch.manual_seed(123)
    expected_next_global_draw = torch.rand(1)
    torch.manual_seed(123)
    results = {tuple(int(x) for x in verify_block(torch.tensor([3, 0]), q, r, False,
                                                   torch.Generator().manual_seed(5))) for _ in range(10)}
    assert len(results) == 1
    assert torch.equal(torch.rand(1), expected_next_global_draw)  # the global RNG was not advanced
