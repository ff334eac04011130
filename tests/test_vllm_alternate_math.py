"""Alternate proposals in vLLM (cos/vllm_backend/alternate.py), the parts that are plain arithmetic and
bookkeeping: the rejection sampler's target rows, the withheld token, when the path applies. No vLLM
needed; tests/vllm/test_vllm_alternate.py runs the path in vLLM (greedy identity, Monte Carlo law)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from cos import SamplingParams
from cos.combination import Contrastive, ProxyTuning, WeightedEnsemble
from cos.sampling import process_logits
from cos.vllm_backend.alternate import PLACEHOLDER, AlternateState, plain_sampling, wanted

V = 50
GREEDY, SAMPLED = SamplingParams(temperature=0), SamplingParams(temperature=0.7, top_k=10, top_p=0.9)


def spec(num_draft_tokens: list[int]) -> SimpleNamespace:
    """vLLM's SpecDecodeMetadata as the sampler sees it: each request's draft rows, then its bonus row."""
    target, bonus, row = [], [], 0
    for n in num_draft_tokens:
        target += range(row, row + n)
        bonus.append(row + n)
        row += n + 1
    return SimpleNamespace(num_draft_tokens=num_draft_tokens, target_logits_indices=torch.tensor(target),
                           bonus_logits_indices=torch.tensor(bonus))


CASES = {  # combination, the drafting member
    "cd-m1-drafts": (Contrastive(n_members=2, alpha=0.1), 1),
    "we-m0-drafts": (WeightedEnsemble(n_members=2, weights=(0.3, 0.7)), 0),
    "we3-m1-drafts": (WeightedEnsemble(n_members=3, weights=(0.5, 0.2, 0.3)), 1),
    "proxy-m2-drafts": (ProxyTuning(n_members=3), 2),
}


@pytest.mark.parametrize("case", list(CASES))
def test_draft_rows_are_log_r_and_bonus_rows_the_verifiers_proposal(case):
    combination, draft_index = CASES[case]
    torch.manual_seed(0)
    state = AlternateState(combination, draft_index)
    kept = torch.randn(2, 3, V)  # the drafter's logits of the drafts it proposed, rows by request "b", "a"
    state.keep_drafts(kept, ["b", "a"])
    req_ids, drafts = ["a", "b"], [2, 1]  # this step's row order differs from the drafting step's
    assert state.covers(req_ids, drafts)
    verifiers = [torch.randn(5, V) for _ in range(combination.n_members - 1)]  # config order, drafter left out
    params = [SAMPLED] * 3 + [GREEDY] * 2  # a's rows (2 drafts + bonus), then b's (1 draft + bonus)
    out = state.targets(verifiers, spec(drafts), req_ids, params)

    def members(row, drafter):
        rows = [v[row] for v in verifiers]
        return rows[:draft_index] + [drafter] + rows[draft_index:]

    for row, (req, j) in zip([0, 1, 3], [(1, 0), (1, 1), (0, 0)]):  # draft rows: "a" is kept row 1, "b" row 0
        want = combination.distribution(members(row, kept[req, j]), params[row]).log()
        torch.testing.assert_close(out[row], want)
    for row in (2, 4):  # bonus rows: log q_v, the withheld token's law, from the verifiers' rows alone
        want = combination.proposal(members(row, None), params[row])
        torch.testing.assert_close(out[row].exp(), want)
        if combination.n_members == 2:  # one verifier: its own p_v
            torch.testing.assert_close(want, process_logits(verifiers[0][row], params[row]).softmax(-1))


def test_a_fully_accepted_block_withholds_its_bonus_with_the_law_it_was_drawn_from():
    state = AlternateState(WeightedEnsemble(n_members=2), 1)
    targets = torch.randn(6, V)
    output = torch.tensor([[5, 6, 7], [8, PLACEHOLDER, PLACEHOLDER]])  # a: 2 drafts + bonus; b: rejected at 2nd
    state.withhold(output, spec([2, 2]), ["a", "b"], targets, greedy=False)
    assert output.tolist() == [[5, 6, PLACEHOLDER], [8, PLACEHOLDER, PLACEHOLDER]]  # only accepted tokens emitted
    assert list(state.withheld) == ["a"]
    token, q = state.withheld["a"]
    assert token == 7
    torch.testing.assert_close(q, targets[2].softmax(-1))  # a's bonus row
    state.withhold(torch.tensor([[1, 2, 3]]), spec([2]), ["c"], targets, greedy=True)
    assert state.withheld == {"c": (3, None)}  # greedy: vLLM verifies by argmax, no q
    assert (state.rounds, state.withheld_tokens) == (3, 2)


def test_the_verifier_runs_alone_only_where_every_draft_has_kept_logits():
    state = AlternateState(WeightedEnsemble(n_members=2), 1)
    assert not state.covers(["a"], [2])  # nothing kept yet (after prefill, after a standard step)
    state.keep_drafts(torch.zeros(2, 3, V), ["a", "b"])
    assert state.covers(["b", "a"], [3, 1])
    assert not state.covers(["a", "c"], [1, 1])  # c's drafts were not proposed by this drafter
    assert not state.covers(["a", "b"], [1, 0])  # b drafts nothing this step: its row needs the composite
    assert not state.covers(["a"], [4])  # more drafts than were kept
    assert not state.covers([], [])
    state.keep_drafts(None, [])
    assert not state.covers(["a"], [1])


def metadata(**overrides) -> SimpleNamespace:
    plain = dict(no_penalties=True, bad_words_token_ids={}, allowed_token_ids_mask=None,
                 thinking_budget_state_holder=None, logitsprocs=SimpleNamespace(all=[]))
    return SimpleNamespace(**(plain | overrides))


def processor(name: str, **state):
    return type(name, (), state)()


def test_plain_sampling_is_softmax_of_the_logits_and_nothing_else():
    assert plain_sampling(metadata())
    idle = [processor("MinPLogitsProcessor", min_p_count=0), processor("LogitBiasLogitsProcessor", biases={}),
            processor("MinTokensLogitsProcessor", min_toks={})]
    assert plain_sampling(metadata(logitsprocs=SimpleNamespace(all=idle)))
    for changed in [dict(no_penalties=False), dict(bad_words_token_ids={0: [[1]]}),
                    dict(allowed_token_ids_mask=torch.zeros(1, V, dtype=torch.bool)),
                    dict(thinking_budget_state_holder=SimpleNamespace(has_tracked_requests=lambda: True)),
                    dict(logitsprocs=SimpleNamespace(all=[processor("MinPLogitsProcessor", min_p_count=1)])),
                    dict(logitsprocs=SimpleNamespace(all=[processor("MinTokensLogitsProcessor", min_toks={0: 1})])),
                    dict(logitsprocs=SimpleNamespace(all=[processor("SomeoneElsesProcessor")]))]:
        assert not plain_sampling(metadata(**changed)), changed


def config(hf_config: dict | None = None, **spec) -> SimpleNamespace:
    return SimpleNamespace(
        model_config=SimpleNamespace(hf_config=SimpleNamespace(**(hf_config or {}))),
        speculative_config=SimpleNamespace(**({"disable_padded_drafter_batch": False, "parallel_drafting": False}
                                              | spec)),
        scheduler_config=SimpleNamespace(async_scheduling=False))


def test_the_path_applies_to_a_drafting_member_on_vllms_synchronous_padded_drafter():
    assert wanted(config(), 2)
    assert wanted(config(), 3)  # the verifier group: every member but the drafter
    assert wanted(config({"cos_alternate_proposals": True}), 2)
    assert not wanted(config({"cos_alternate_proposals": False}), 2)  # VllmEngine(alternate_proposals=False)
    assert not wanted(config(), 1)  # one member: nothing to alternate with
    assert not wanted(config(disable_padded_drafter_batch=True), 2)
    assert not wanted(config(parallel_drafting=True), 2)
    asynchronous = config()
    asynchronous.scheduler_config.async_scheduling = True
    assert not wanted(asynchronous, 2)
