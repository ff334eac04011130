"""The composite vLLM model: n member LMs in one model, whose logits are log r (docs/algorithm.md §2).

Each member is vLLM's own implementation of its architecture (LlamaForCausalLM, Qwen2ForCausalLM, ...),
built from its own HF config, so it keeps its own weights and its own paged KV cache (vLLM allocates
cache for every attention layer it finds; layer names stay `members.m0.model.layers.3.self_attn.attn`:
exactly one integer, as vLLM requires).

- `forward` runs every member on the same tokens and returns their final hidden states side by side
  [T, H_0 + H_1 + ...].
- `compute_logits` splits them, gets each member's logits l_i [R, V] and returns
  log r = log Combination.distribution([l_0, l_1, ...], params) — the HF engine's own function — with
  `params` the request's CoS sampling parameters (request_params.py).

Sampling semantics (the contract with VllmEngine, see __init__.py): vLLM must run at temperature 1
(0 for greedy) with top-k / top-p off, so that it samples from softmax(log r) = r itself, verifies
drafts against r, and takes argmax r under greedy decoding.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable

import torch
from torch import nn
from vllm.config import VllmConfig, set_current_vllm_config
from vllm.model_executor.model_loader.weight_utils import (
    filter_duplicate_safetensors_files,
    pt_weights_iterator,
    safetensors_weights_iterator,
)
from vllm.model_executor.models.registry import ModelRegistry

from .alternate import AlternateState, plain_sampling
from .composite import CompositeSpec
from .member_draft import composite_member
from .patches import check_runner, model_runner_above
from .request_params import RowParams, grouped


class CosCollaborativeForCausalLM(nn.Module):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = "") -> None:
        super().__init__()
        root = vllm_config.model_config.model
        self.spec = CompositeSpec.from_config(vllm_config.model_config.hf_config, root)
        self.combination = self.spec.combination
        self.members = nn.ModuleDict()
        for m in self.spec.members:
            sub = vllm_config.with_hf_config(m.config)
            model_cls, _ = ModelRegistry.resolve_model_cls(m.config.architectures, model_config=sub.model_config)
            with set_current_vllm_config(sub):
                self.members[m.name] = model_cls(vllm_config=sub, prefix=_join(prefix, f"members.{m.name}"))
        self.hidden_sizes = [m.config.hidden_size for m in self.spec.members]
        self.row_params = RowParams()
        self.recorded: list | None = None  # tests set a list: (member logits, row params, log r) of every call
        self.alternate: AlternateState | None = None  # set by the drafting member (member_draft.py)
        self._member_drafts = composite_member(vllm_config) is not None
        self._runner_checked = False  # the first call from a model runner checks that the CoS hooks are on its path

    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("a CoS composite has one embedding per member: feed it input_ids, not embeddings")

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, intermediate_tensors=None,
                inputs_embeds: torch.Tensor | None = None, **kwargs) -> torch.Tensor:
        if inputs_embeds is not None or intermediate_tensors is not None:
            raise NotImplementedError("CoS composite: inputs_embeds / pipeline parallelism are not supported")
        skip = self._drafter_left_out(input_ids.shape[0])
        hidden = [member(input_ids, positions) if i != skip else None for i, member in enumerate(self.members.values())]
        if skip is not None:  # the drafter's columns, never read (compute_logits uses the verifiers' alone)
            ran = next(h for h in hidden if h is not None)
            hidden[skip] = ran.new_zeros(input_ids.shape[0], self.hidden_sizes[skip])  # n × [T, H_i]
        return torch.cat(hidden, dim=-1)  # [T, ΣH]

    def _drafter_left_out(self, num_tokens: int) -> int | None:
        """The drafting member's index when this step's pass runs the verifiers alone (alternate.py): every
        request is a draft block whose drafter logits are kept, and vLLM samples plainly; else None."""
        state = self.alternate
        if state is None:
            return None
        state.verifier_only = False
        runner = self.row_params.runner()
        if runner is None:
            return None
        batch = runner.input_batch
        n = batch.num_reqs
        drafts = [len(d) for d in (batch.spec_token_ids or [()] * n)[:n]]
        structured = any(getattr(getattr(runner.requests.get(r), "sampling_params", None), "structured_outputs", None)
                         for r in batch.req_ids[:n])
        state.verifier_only = (num_tokens == n + sum(drafts) and state.covers(batch.req_ids[:n], drafts)
                               and plain_sampling(batch.sampling_metadata) and not structured)
        return state.draft_index if state.verifier_only else None

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        if not self._runner_checked:
            runner = model_runner_above()
            if runner is not None:
                check_runner(runner, self._member_drafts)  # never a silent fallback to vLLM's stock path
                self._runner_checked = True
        parts = torch.split(hidden_states, self.hidden_sizes, dim=-1)
        if self.alternate is not None and self.alternate.verifier_only:  # the sampler forms r (alternate.py)
            skip = self.alternate.draft_index
            self.alternate.verifier_logits = [member.compute_logits(h).float() for i, (member, h)
                                              in enumerate(zip(self.members.values(), parts)) if i != skip]
            return self.alternate.verifier_logits[0]  # what vLLM passes on to _sample, where r is formed
        logits = [member.compute_logits(h).float() for member, h in zip(self.members.values(), parts)]  # n × [R, V]
        params = self.row_params(hidden_states.shape[0])
        out = torch.empty_like(logits[0])
        for p, idx in grouped(params, out.device):
            picked = [l if len(idx) == l.shape[0] else l[idx] for l in logits]
            out[idx] = self.combination.distribution(picked, p).log()  # log r, [rows, V]
        if self.recorded is not None:
            self.recorded.append((logits, params, out.clone()))
        return out

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """Ignore the root marker file; read each member's weights from its own (linked) folder."""
        for _ in weights:
            pass
        loaded: set[str] = set()
        for m in self.spec.members:
            names = self.members[m.name].load_weights(_member_weights(str(m.path)))
            loaded |= {f"members.{m.name}.{n}" for n in names}
        return loaded


def _member_weights(folder: str) -> Iterable[tuple[str, torch.Tensor]]:
    files = sorted(glob.glob(os.path.join(folder, "*.safetensors")))
    if files:
        files = filter_duplicate_safetensors_files(files, folder, "model.safetensors.index.json")
        return safetensors_weights_iterator(files, False)
    files = sorted(f for f in glob.glob(os.path.join(folder, "*.bin")) if not f.endswith("training_args.bin"))
    if not files:
        raise FileNotFoundError(f"member folder {folder} has no *.safetensors or *.bin weights")
    return pt_weights_iterator(files, False)


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name
