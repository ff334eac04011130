"""backend=vllm: a checked RunConfig -> composite folders (cached) -> VllmEngines -> the runner's engines.

How each method runs there is backend.py's table: the composite of its members and its combination
(the target alone for large_model and sd), decoded as is, or with one member as vLLM's draft model
(*_sd: the plan's proposer, the smallest member by default, drafting its γ, the whole composite verifying;
*_chef: its proposer drafting, verified with alternate proposals; sd: draft_model).
The baseline of compare_with is a second engine (vLLM fixes speculation per engine).
Engines are kept in `loaded` when the caller passes one (a process running many configs); otherwise
the run closes them when it ends (Built.close).
"""

from __future__ import annotations

import json
import struct
from math import prod
from pathlib import Path

from ..loading import load_tokenizer
from ..plan import REGISTRY, Plan
from .build import Built
from .config import MethodSpec, RunConfig

COMBINATION_KEYS = ("lam", "weights", "alpha", "plausibility", "target", "space", "kwargs")
ONE_MODEL = {"kind": "we", "weights": [1.0]}  # r = p_model: large_model and sd's target as a composite


def combination_spec(spec: MethodSpec) -> dict:
    """The composite's combination ({kind, **make_combination kwargs}) for a method's plan arguments."""
    family = REGISTRY[spec.method].family
    if family.one_model:
        return dict(ONE_MODEL)
    kw = spec.plan_kwargs
    kind = kw.get("combination") or family.preset
    return {"kind": kind, **{k: kw[k] for k in COMBINATION_KEYS if kw.get(k) is not None}}


def parameter_count(folder: str) -> int:
    """Parameters of a model folder from its safetensors headers (no weights read); 0 if it has none."""
    total = 0
    for f in Path(folder).glob("*.safetensors"):
        with f.open("rb") as fh:
            header = json.loads(fh.read(struct.unpack("<Q", fh.read(8))[0]))
        total += sum(prod(t["shape"]) for name, t in header.items() if name != "__metadata__")
    return total


def eos_token_ids(paths: list[str], tokenizer) -> set[int]:
    """Where the HF engine stops for these members (cos.Engine._eos): every member's generation_config
    EOS and the tokenizer's."""
    from ..tokens import eos_ids, generation_eos

    return eos_ids((generation_eos(p) for p in paths), tokenizer)


def vllm_method(spec: MethodSpec, paths: list[str], run: RunConfig, tokenizer, loaded: dict | None):
    """(VllmMethod, whether this call started its engine)."""
    from ..vllm_backend.composite_cache import cached_composite
    from ..vllm_backend.memory import share_gpu
    from ..vllm_backend.engine import VllmEngine
    from ..vllm_backend.method import VllmMethod

    members = paths[: len(spec.members)]
    for path, role in zip(members, spec.roles):
        if not Path(path).is_dir():
            raise ValueError(f"{role}={path}: backend=vllm builds a composite folder from local model folders; "
                             f"download the model first (or use backend=hf)")
    plan: Plan = spec.plan().resolve([parameter_count(p) for p in members])
    loop = REGISTRY[spec.method].loop
    in_composite = members[:1] if loop == "sd" else members
    composite = cached_composite(in_composite, combination_spec(spec))
    draft, gamma = None, 1
    if loop == "sd":
        draft, gamma = str(Path(members[1]).resolve()), plan.gammas[1]
    elif loop in ("naive", "cos"):  # cos: the verifier alone verifies, its sample withheld (alternate.py)
        draft, gamma = plan.proposer, plan.gammas[plan.proposer]
    # disable_log_stats=False: vLLM then times each request (decode seconds without the prefill)
    options = {"disable_log_stats": False, **run.vllm_options, "dtype": run.dtypes[0]}
    share_gpu(options, engines=1 if run.baseline is None else 2)  # the method's engine and compare_with's
    if loop in ("naive", "cos"):
        options["alternate_proposals"] = loop == "cos"
    if draft is None:  # γ by batch size is the speculative method's; the standard baseline drafts nothing
        options.pop("speculative_by_batch", None)
    key = ("vllm", str(composite), draft, gamma, json.dumps(options, sort_keys=True, default=str))
    cache = {} if loaded is None else loaded
    started = key not in cache
    if started:
        cache[key] = VllmEngine(composite, speculative_draft=draft, num_speculative_tokens=gamma, **options)
    return VllmMethod(cache[key], plan, eos_token_ids(members, tokenizer)), started and loaded is None


def build_vllm_engines(run: RunConfig, paths: list[str], loaded: dict | None = None) -> Built:
    tokenizer = load_tokenizer(paths[0])
    engine, own = vllm_method(run.method, paths, run, tokenizer, loaded)
    owned = [engine] if own else []
    baseline = None
    if run.baseline is not None:
        baseline, own = vllm_method(run.baseline, paths, run, tokenizer, loaded)
        owned += [baseline] if own else []
    return Built(engine, baseline, tokenizer, paths, tuple(owned))
