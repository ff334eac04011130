"""The composite's own member drafts: its weights and KV cache resident once, and a step that drafts
nothing runs no drafter at all.

vLLM's draft-model speculation loads the draft as a second model with its own KV cache, although a CoS
composite already holds that member: its weights were resident twice, its KV cache too (a 1 GiB cache
held 20,096 tokens instead of 26,112), and a step drafting nothing (γ = 0 from `speculative_by_batch`)
still ran the draft to keep its cache in sync, so batch-scale steps lost a fifth of their speed.
`MemberDraftProposer` drafts with the composite's member module itself (`model.members[name]`, the
member whose folder is the draft's): the drafter's attention layers ARE that member's, so they read and
write the member's own paged KV cache. The composite's pass writes the member's KV at every position it
feeds, so on a step with γ = 0 the drafter has nothing to do and returns at once; on a drafting step
vLLM's first draft pass re-feeds the step's tokens at the same positions (the same values, rewritten)
and then drafts beyond them, in slots the scheduler reserved, which the next verify pass overwrites.
Probabilistic drafts (`draft_sample_method: probabilistic`, VllmEngine's default for a member draft)
come from the member's CoS-processed distribution, the q of the HF engine's Naive-CoS, rather than from
vLLM's softmax of the raw logits: under sampling q is then close to r (WE: a term of it).

It also carries the alternate proposals (alternate.py): it keeps its raw
logits of every draft for r, feeds the verifier's withheld token in its first pass and proposes it first.

Exact as before: drafts are only proposals, verified against r by vLLM's rejection sampler; greedy
output equals standard decoding (tests/vllm). A draft that is not a member of the composite (another
folder) keeps vLLM's own behaviour. Installed by the plugin (patches.draft_with_member): vLLM's model
runner builds its drafter from the name `DraftModelProposer` in `vllm.v1.worker.gpu_model_runner`
(CPUModelRunner inherits it), which is rebound to this subclass.
"""

from __future__ import annotations

import torch
from vllm.config import get_layers_from_vllm_config
from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase
from vllm.v1.spec_decode.draft_model import DraftModelProposer

from ..sampling import process_logits
from .alternate import AlternateState, wanted
from .composite import CompositeSpec
from .patches import is_composite
from .request_params import grouped


def composite_member(vllm_config) -> str | None:
    """The name of the composite member whose folder is the draft model's, or None (not a composite,
    or a draft from elsewhere)."""
    model_config, spec = vllm_config.model_config, vllm_config.speculative_config
    if not is_composite(model_config) or spec is None:
        return None
    return CompositeSpec.from_config(model_config.hf_config, model_config.model).member_at(spec.draft_model_config.model)


class MemberDraftProposer(DraftModelProposer):
    def __init__(self, vllm_config, device, runner=None) -> None:
        super().__init__(vllm_config=vllm_config, device=device, runner=runner)
        self.member = composite_member(vllm_config)
        self._alternate: AlternateState | None = None  # alternate.py, set at load_model where it applies
        self._req_ids: list[str] | None = None  # this step's requests, in row order
        self._withheld_rows: list[int] = []  # rows whose first draft is the verifier's withheld token
        self._capture = False  # keep the member's hidden states of the next forward (the first draft pass)
        self._first_hidden: torch.Tensor | None = None
        self._first_sampled: torch.Tensor | None = None  # the first pass's row of each request's last token
        self._draft_logits: list[torch.Tensor] = []

    def load_model(self, target_model: torch.nn.Module) -> None:
        if self.member is None:
            return super().load_model(target_model)
        self._composite = getattr(target_model, "unwrap", lambda: target_model)()
        self._member_module = self._composite.members[self.member]
        super().load_model(target_model)  # _get_model below: no new layers, so no draft layers found
        own = {id(module) for module in self._member_module.modules()}
        layers = get_layers_from_vllm_config(self.vllm_config, AttentionLayerBase)
        self._draft_attn_layer_names = {name for name, layer in layers.items()
                                        if id(layer) in own and layer.get_kv_cache_spec(self.vllm_config) is not None}
        assert self._draft_attn_layer_names, f"member {self.member} has no attention layer with a KV cache"
        if wanted(self.vllm_config, len(self._composite.members)):
            index = list(self._composite.members).index(self.member)
            self._alternate = self._composite.alternate = AlternateState(self._composite.combination, index)
            self._member_module.register_forward_hook(self._keep_first_hidden)

    def _keep_first_hidden(self, module, args, output) -> None:
        if self._capture:
            self._first_hidden, self._capture = output, False

    def set_inputs_first_pass(self, *args, **kwargs):
        num_tokens, token_indices_to_sample, metadata = super().set_inputs_first_pass(*args, **kwargs)
        self._first_sampled = token_indices_to_sample
        return num_tokens, token_indices_to_sample, metadata

    def prepare_next_token_ids_padded(self, sampled_token_ids, requests, gpu_input_batch, discard_request_mask):
        """vLLM's next token per request, except where the verifier withheld t: the first pass feeds t
        after the accepted drafts (all of them valid, as at a full accept with t as the bonus)."""
        next_token_ids, valid = super().prepare_next_token_ids_padded(
            sampled_token_ids, requests, gpu_input_batch, discard_request_mask)
        self._req_ids = list(gpu_input_batch.req_ids[:gpu_input_batch.num_reqs])
        withheld = self._alternate.withheld if self._alternate is not None else {}
        self._withheld_rows = [i for i, r in enumerate(self._req_ids) if r in withheld]
        for i in self._withheld_rows:
            next_token_ids[i] = withheld[self._req_ids[i]][0]
            valid[i] += 1
        return next_token_ids, valid

    def _get_model(self) -> torch.nn.Module:
        return super()._get_model() if self.member is None else self._member_module

    def _sample_from_logits(self, logits: torch.Tensor, sampling_metadata) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Probabilistic drafts from the member's own CoS distribution q = softmax(process(l)) with each
        request's CoS temperature / top-k / top-p (vLLM runs at temperature 1 with its own top-k/top-p off,
        so its sampler draws from softmax of what it is given, and hands that q to the rejection sampler)."""
        if self.member is None or not self._enable_probabilistic_draft_probs or sampling_metadata.all_greedy:
            return super()._sample_from_logits(logits, sampling_metadata)
        params = self._composite.row_params(logits.shape[0])
        processed = torch.empty(logits.shape, dtype=torch.float32, device=logits.device)
        for p, rows in grouped(params, logits.device):
            processed[rows] = process_logits(logits[rows], p)
        return super()._sample_from_logits(processed, sampling_metadata)

    def _sample_draft_tokens(self, hidden_states, sampling_metadata):
        """vLLM's draft, keeping the member's raw logits of it (r at the draft's position needs them)."""
        if self._alternate is None:
            return super()._sample_draft_tokens(hidden_states, sampling_metadata)
        logits = self.model.compute_logits(hidden_states)
        self._draft_logits.append(logits.float())
        if not self._enable_probabilistic_draft_probs or sampling_metadata.all_greedy:
            return logits.argmax(dim=-1), None
        return self._sample_from_logits(logits, sampling_metadata)

    def propose(self, num_speculative_tokens, *args, **kwargs) -> torch.Tensor:
        req_ids, rows, self._req_ids, self._withheld_rows = self._req_ids, self._withheld_rows, None, []
        # (the sampler forgot last step's kept logits: a step that keeps none verifies with the composite)
        if self.member is not None and num_speculative_tokens == 0:  # the composite keeps the member's KV
            self.num_speculative_tokens, self._last_draft_probs = 0, None  # a withheld t is dropped here
            metadata = kwargs.get("common_attn_metadata", args[5] if len(args) > 5 else None)
            return torch.empty(metadata.batch_size(), 0, dtype=torch.int64, device=self.device)
        if self._alternate is None or req_ids is None:
            return super().propose(num_speculative_tokens, *args, **kwargs)
        gamma = num_speculative_tokens
        # a withheld t is a row's first draft: one drafter pass fewer where every row has one
        inner = gamma - 1 if rows and len(rows) == len(req_ids) else gamma
        self._draft_logits, self._capture = [], bool(rows)
        tokens = super().propose(inner, *args, **kwargs)  # [B, inner]
        logits = torch.stack(self._draft_logits, dim=1) if self._draft_logits else None
        probs = self._last_draft_probs
        if rows:
            tokens, logits, probs = self._put_withheld_first(gamma, rows, req_ids, tokens, logits, probs)
        self._draft_logits, self._first_hidden = [], None
        self.num_speculative_tokens, self._last_draft_probs = gamma, probs
        self._alternate.keep_drafts(logits, req_ids)
        return tokens

    def _put_withheld_first(self, gamma, rows, req_ids, tokens, logits, probs):
        """Each withheld row's drafts become [t, its first γ - 1 drafts], with the member's logits at t's
        position (its first-pass row before t) and q(t) = p_v, the distribution t was drawn from."""
        withheld = self._alternate.withheld
        at = torch.tensor(rows, device=tokens.device)
        before_t = self._first_sampled[at].long() - 1
        t_logits = self.model.compute_logits(self._first_hidden[before_t]).float()  # [W, V]
        batch, vocab = len(req_ids), t_logits.shape[-1]
        out_tokens = torch.empty(batch, gamma, dtype=tokens.dtype, device=tokens.device)
        out_logits = torch.empty(batch, gamma, vocab, dtype=torch.float32, device=tokens.device)
        out_tokens[:, :tokens.shape[1]] = tokens[:, :gamma]
        if logits is not None:
            out_logits[:, :logits.shape[1]] = logits[:, :gamma]
        out_tokens[at, 0] = torch.tensor([withheld[req_ids[i]][0] for i in rows], dtype=tokens.dtype)
        out_tokens[at, 1:] = tokens[at, :gamma - 1]
        out_logits[at, 0] = t_logits
        if logits is not None:
            out_logits[at, 1:] = logits[at, :gamma - 1]
        qs = [withheld[req_ids[i]][1] for i in rows]
        if any(q is None for q in qs):  # all greedy: vLLM compares argmax r with each draft, no q
            return out_tokens, out_logits, None
        out_probs = torch.zeros(batch, gamma, vocab, dtype=torch.float32, device=tokens.device)
        if probs is not None:
            out_probs[:, :probs.shape[1]] = probs[:, :gamma]
            out_probs[at, 1:] = probs[at, :gamma - 1]
        else:  # argmax drafts under sampling: vLLM reads a missing q as one-hot on the draft; t's is p_v
            out_probs.scatter_(2, out_tokens.long().unsqueeze(-1), 1.0)
        out_probs[at, 0] = torch.stack(qs)
        return out_tokens, out_logits, out_probs

