"""`backend`: which engine runs a method, and what the vLLM backend expresses (checked before any model loads).

    hf    this project's engine (cos.Engine): every method.
    vllm  the members as one composite model inside vLLM (cos.vllm_backend, built and cached from the
          members with build_composite); only what vLLM's scheduler runs as it is:

| method (loop) | on vLLM |
|---|---|
| large_model, we, cd, custom (standard) | the composite (one member for large_model), standard decoding |
| we_sd, cd_sd, custom_sd (naive) | the composite, its proposer member as vLLM's draft model: Naive-CoS with the exact bonus (vLLM's rejection sampler always draws one), so method.bonus=exact; γ = the proposer's, fixed |
| we_chef, cd_chef, custom_chef (cos), two members, the verifier's γ = 1 | the same, verified as CoS: the verifier alone, its own sample withheld as the next first draft (cos.vllm_backend.alternate, the paper's setting γ = [1, k]) |
| sd | the target alone, draft_model as vLLM's draft model, γ fixed |
| *_chef otherwise, we_mix, we_mix_sd | not expressed: backend=hf |

vLLM places the model and chooses its kernels itself, so the member-runtime keys of the HF engine
(per-member device / dtype, threads, kernels, compile) must keep their defaults; vLLM's own options
go in the `vllm` mapping.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from ..plan import LOOP_KINDS, REGISTRY

if TYPE_CHECKING:
    from .config import MethodSpec

BACKENDS = ("hf", "vllm")  # which methods each expresses: plan.REGISTRY (Method.backends)


def check_backend(value) -> str:
    if value not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {value!r}")
    return value


def check_vllm_method(spec: "MethodSpec", schedule: str | None, role: str = "method ") -> "MethodSpec":
    """The method as vLLM runs it (schedule fixed), or a one-line error naming what to change."""
    name, info = spec.method, REGISTRY[spec.method]
    loop, head = info.loop, f"{role}{name}"
    if "vllm" not in info.backends:
        naive = [m.name for m in REGISTRY.values() if m.family == info.family and m.loop == "naive"]
        alternative = f"{naive[0]} (method.bonus=exact) or {info.family.standard}" if naive else ""
        raise ValueError(f"{head}: {LOOP_KINDS[loop].what} is not expressed by vLLM: use backend=hf"
                         + (f", or {alternative} on backend=vllm" if alternative else ""))
    kw = dict(spec.plan_kwargs)
    if loop == "cos":
        _check_vllm_cos(head, len(spec.members), kw.get("gamma", 5))
    if loop == "naive" and kw.get("bonus") != "exact":
        raise ValueError(f"{head} with bonus={kw.get('bonus')!r}: vLLM's rejection sampler always draws the "
                         f"bonus token from r (Naive-CoS with the exact bonus): set method.bonus=exact, or use "
                         f"backend=hf")
    if kw.get("tree") not in (None, "none"):
        raise ValueError(f"{head}: draft trees run on backend=hf only (vLLM drafts chains): set method.tree=none, "
                         f"or use backend=hf")
    if kw.get("draft_threshold"):
        raise ValueError(f"{head}: vLLM drafts a fixed γ, so method.draft_threshold does not apply on "
                         f"backend=vllm: unset it, or use backend=hf")
    if loop != "standard":
        if schedule == "adaptive":
            raise ValueError(f"{head}: vLLM drafts a fixed γ every round, so method.schedule=adaptive does "
                             f"not apply on backend=vllm: set method.schedule=fixed (or null), or use backend=hf")
        kw["schedule"] = "fixed"
    return replace(spec, plan_kwargs=kw)


def _check_vllm_cos(head: str, n_members: int, gamma) -> None:
    """vLLM's drafter is one fixed member; the others verify together and propose only their withheld token."""
    if not isinstance(gamma, int) and sorted(gamma)[:-1] != [1] * (n_members - 1):
        ones = ", ".join(["1"] * (n_members - 1))
        raise ValueError(f"{head} with gamma={list(gamma)}: on vLLM the verifiers propose only their own withheld "
                         f"token (γ = 1, the paper's setting): set method.gamma=[{ones}, k] with k for the member "
                         f"that drafts (in its place), or use backend=hf")


def check_vllm_runtime(cfg: Mapping) -> dict:
    """The member-runtime keys vLLM decides itself must keep their defaults; returns the vllm options."""
    dtype = cfg.get("dtype", "float32")
    if isinstance(dtype, (list, tuple)) and len(set(dtype)) > 1:
        raise ValueError(f"backend=vllm runs every member in one dtype: give dtype one value, got {list(dtype)}")
    changed = [f"{key}={cfg[key]!r}" for key, default in (("device", "auto"), ("threads", "auto"),
                                                          ("kernels", "auto"), ("compile", False))
               if key in cfg and cfg[key] != default and not (key == "device" and _all_auto(cfg[key]))]
    if changed:
        raise ValueError(f"backend=vllm places the model and picks its kernels itself: {', '.join(changed)} would be "
                         f"ignored; set them back to their defaults (device=auto threads=auto kernels=auto "
                         f"compile=false) and give vLLM's own options in vllm={{...}}, or use backend=hf")
    options = cfg.get("vllm") or {}
    if not isinstance(options, Mapping):
        raise ValueError(f"vllm must be a mapping of vllm.LLM options, got {options!r}")
    for key in ("model", "dtype", "speculative_config"):
        if key in options:
            raise ValueError(f"vllm.{key} is set by the runner (the composite, `dtype`, the method): remove it")
    return dict(options)


def _all_auto(device) -> bool:
    return all(d == "auto" for d in (device if isinstance(device, (list, tuple)) else [device]))
