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

Exact as before: drafts are only proposals, verified against r by vLLM's rejection sampler; greedy
output equals standard decoding (tests/vllm). A draft that is not a member of the composite (another
folder) keeps vLLM's own behaviour. Installed by the plugin (`install`): vLLM's model runner builds its
drafter from the name `DraftModelProposer` in `vllm.v1.worker.gpu_model_runner` (CPUModelRunner
inherits it), which is rebound to this subclass.
"""

from __future__ import annotations

import torch
from vllm.config import get_layers_from_vllm_config
from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase
from vllm.v1.spec_decode.draft_model import DraftModelProposer

from ..sampling import process_logits
from .composite import ARCHITECTURE, CompositeSpec


def composite_member(vllm_config) -> str | None:
    """The name of the composite member whose folder is the draft model's, or None (not a composite,
    or a draft from elsewhere)."""
    model_config, spec = vllm_config.model_config, vllm_config.speculative_config
    if ARCHITECTURE not in (getattr(model_config.hf_config, "architectures", None) or []) or spec is None:
        return None
    return CompositeSpec.from_config(model_config.hf_config, model_config.model).member_at(spec.draft_model_config.model)


class MemberDraftProposer(DraftModelProposer):
    def __init__(self, vllm_config, device, runner=None) -> None:
        super().__init__(vllm_config=vllm_config, device=device, runner=runner)
        self.member = composite_member(vllm_config)

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
        for p in set(params):
            rows = torch.tensor([i for i, q in enumerate(params) if q == p], device=logits.device)
            processed[rows] = process_logits(logits[rows], p)
        return super()._sample_from_logits(processed, sampling_metadata)

    def propose(self, num_speculative_tokens, *args, **kwargs) -> torch.Tensor:
        if self.member is not None and num_speculative_tokens == 0:  # the composite keeps the member's KV
            self.num_speculative_tokens, self._last_draft_probs = 0, None
            metadata = kwargs.get("common_attn_metadata", args[5] if len(args) > 5 else None)
            return torch.empty(metadata.batch_size(), 0, dtype=torch.int64, device=self.device)
        return super().propose(num_speculative_tokens, *args, **kwargs)


def install() -> None:
    """Make vLLM's model runner build MemberDraftProposer for draft-model speculation (idempotent)."""
    from vllm.v1.worker import gpu_model_runner

    if gpu_model_runner.DraftModelProposer is not MemberDraftProposer:
        gpu_model_runner.DraftModelProposer = MemberDraftProposer
