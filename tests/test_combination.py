"""Combination math and sampling semantics against hand-written formulas (docs/algorithm.md §2)."""

from __future__ import annotations

import torch

from cos import Contrastive, Custom, Mean, ProxyTuning, Realignment, SamplingParams, WeightedEnsemble
from cos.sampling import process_logits

L = [torch.tensor([[2.0, 1.0, 0.0, -1.0]]), torch.tensor([[0.0, 3.0, 1.0, 0.5]]), torch.tensor([[1.0, 0.0, 2.0, 0.0]])]
T1 = SamplingParams(1.0)


def test_weighted_ensemble_mixes_probabilities_with_the_users_weights():
    r = WeightedEnsemble(n_members=3, weights=(0.5, 0.3, 0.2)).distribution(L, T1)
    expected = 0.5 * L[0].softmax(-1) + 0.3 * L[1].softmax(-1) + 0.2 * L[2].softmax(-1)
    assert torch.allclose(r, expected)
    lam = WeightedEnsemble.two_member(0.25).distribution(L[:2], T1)  # r = (1-λ) p_model + λ p_extra
    assert torch.allclose(lam, 0.75 * L[0].softmax(-1) + 0.25 * L[1].softmax(-1))
    assert torch.allclose(Mean(n_members=3).distribution(L, T1), sum(l.softmax(-1) for l in L) / 3)


def test_temperature_applies_per_member_in_probs_space():
    r = WeightedEnsemble(n_members=2, weights=(0.5, 0.5)).distribution(L[:2], SamplingParams(0.5))
    assert torch.allclose(r, 0.5 * (L[0] / 0.5).softmax(-1) + 0.5 * (L[1] / 0.5).softmax(-1))


def test_contrastive_combines_raw_logits_then_processes():
    r = Contrastive(alpha=0.3).distribution(L[:2], SamplingParams(0.7))
    assert torch.allclose(r, ((L[0] - 0.3 * L[1]) / 0.7).softmax(-1))


def test_plausibility_cut_removes_implausible_expert_tokens():
    r = Contrastive(alpha=0.5, plausibility=0.2).distribution(L[:2], T1)
    p_expert = L[0].softmax(-1)
    cut = p_expert < 0.2 * p_expert.max()
    assert cut.any() and (r[cut] == 0).all() and torch.isclose(r.sum(), torch.tensor(1.0))


def test_proxy_tuning_and_realignment():
    assert torch.allclose(ProxyTuning(n_members=3).distribution(L, T1), (L[0] + L[1] - L[2]).softmax(-1))
    assert torch.allclose(Realignment(n_members=2, lam=0.4).distribution(L[:2], T1),
                          (L[0] + 0.4 * (L[1] - L[0])).softmax(-1))


def test_custom_callable_receives_config_order_in_its_space():
    seen = []

    def first_minus_second(values, scale=1.0):
        seen.append([v.clone() for v in values])
        return scale * (values[0] - values[1])

    r = Custom(n_members=2, fn=first_minus_second, declared_space="logits", kwargs={"scale": 2.0}).distribution(L[:2], T1)
    assert torch.allclose(r, (2.0 * (L[0] - L[1])).softmax(-1))
    assert torch.equal(seen[0][0], L[0]) and torch.equal(seen[0][1], L[1])


def test_top_k_and_top_p():
    logits = torch.tensor([[3.0, 2.0, 1.0, 0.0]])
    assert torch.isinf(process_logits(logits, SamplingParams(1.0, top_k=2))[0, 2:]).all()
    p = logits.softmax(-1)[0]  # ≈ [0.64, 0.24, 0.09, 0.03]
    kept = ~torch.isinf(process_logits(logits, SamplingParams(1.0, top_p=0.7))[0])
    assert kept.tolist() == [True, True, False, False] and p[0] < 0.7 <= p[:2].sum()


def test_a_proposal_from_some_members_is_the_groups_part_of_r():
    """Combination.proposal: the law a verifier group draws its withheld token from (vLLM's alternate
    proposals). WE: the given members' share of r renormalised, so r >= W_G q and a draw from q is
    accepted with probability >= W_G (the group's weight); otherwise the first given member's own p_i."""
    we = WeightedEnsemble(n_members=3, weights=(0.5, 0.3, 0.2))
    q = we.proposal([L[0], None, L[2]], T1)
    torch.testing.assert_close(q, (0.5 * L[0].softmax(-1) + 0.2 * L[2].softmax(-1)) / 0.7)
    r = we.distribution(L, T1)
    assert bool((r >= 0.7 * q - 1e-7).all())
    assert float((q * (r / q).clamp(max=1)).sum()) >= 0.7 - 1e-6  # the acceptance rate of a draw from q
    params = SamplingParams(0.5, top_k=2)
    torch.testing.assert_close(we.proposal([None, L[1], None], params), process_logits(L[1], params).softmax(-1))
    zero = WeightedEnsemble(n_members=3, weights=(0.0, 0.0, 1.0))  # no weight given: the first one's own p
    torch.testing.assert_close(zero.proposal([L[0], L[1], None], T1), L[0].softmax(-1))
    torch.testing.assert_close(ProxyTuning(n_members=3).proposal([L[0], None, L[2]], T1), L[0].softmax(-1))
