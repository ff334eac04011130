"""The one `build`: a checked RunConfig -> validated plans -> resolved model paths -> loaded members
-> Engines (the method, and the compare_with baseline on the same members).

Everything that can fail without loading a model fails first: plans, model names and folders,
devices, dtypes. Members are loaded once; the baseline engine shares them (they are reset per
generation, and the two engines run one after another).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..engine import Engine
from ..loading import (check_before_weights, check_device, check_vocabularies, load_member, load_tokenizer,
                       resolve_dtype)
from .config import RunConfig
from .resolve import resolve_models


@dataclass
class Built:
    engine: Engine  # or, on backend=vllm, a VllmMethod (same interface: plan, generate, warm_up)
    baseline: Engine | None
    tokenizer: object
    paths: list[str]  # resolved member paths, config order
    owned: tuple = ()  # engines to close when the run ends (vLLM engines this build started)

    def close(self) -> None:
        for engine in self.owned:
            engine.close()


def check_before_loading(run: RunConfig, model_path: str | None = None) -> list[str]:
    """Plans, devices, dtypes, model folders: everything checked, nothing loaded. Returns member paths."""
    run.method.plan()
    if run.baseline is not None:
        run.baseline.plan()
    for device in run.devices:
        check_device(device)
    for dtype in run.dtypes:
        resolve_dtype(dtype)
    return resolve_models(run.method.members, run.method.roles, model_path)


def build_engines(run: RunConfig, model_path: str | None = None, paths: list[str] | None = None,
                  loaded: dict | None = None) -> Built:
    """Load the members of `run.method` and return the engine(s). model_path: default $MODEL_PATH.

    loaded: {(path, device, dtype, compile, kernels): Member} kept by a caller that runs many configs in one process
    (scripts/reproduce.py), so each model loads once; members are reset at every generation."""
    # 1. everything that can fail without loading a model (paths: already checked by the caller)
    paths = check_before_loading(run, model_path) if paths is None else paths
    if run.backend == "vllm":
        from .vllm_build import build_vllm_engines

        return build_vllm_engines(run, paths, loaded)
    plan = run.method.plan()
    baseline_plan = run.baseline.plan() if run.baseline else None
    # 2. tokenizers (cheap) then members, in config order
    tokenizers = [load_tokenizer(p) for p in paths]
    if run.dataset.get("chat_template") and not getattr(tokenizers[0], "chat_template", None):
        raise ValueError("dataset.chat_template=true, but the tokenizer of method.model has no chat template: "
                         "set dataset.chat_template=false")
    vocab = check_before_weights(paths, tokenizers)
    if vocab:  # a custom combination's wrong shape or values, before any weights load
        for p in (plan, baseline_plan):
            if p is not None:
                p.combination.probe(vocab)
    loaded = {} if loaded is None else loaded
    keys = [(p, dv, dt, run.compile, run.kernels) for p, dv, dt in zip(paths, run.devices, run.dtypes)]
    for key in keys:
        if key not in loaded:
            loaded[key] = load_member(*key)
    members = [loaded[key] for key in keys]
    check_vocabularies(members, tokenizers)
    # 3. engines: the baseline runs on the same member objects (large_model: the first only)
    engine = Engine(members, plan, tokenizers[0], run.threads)
    baseline = None
    if baseline_plan is not None:
        baseline = Engine(members[: baseline_plan.n_members], baseline_plan, tokenizers[0], run.threads)
    return Built(engine, baseline, tokenizers[0], paths)


def build_engine(cfg, model_path: str | None = None) -> Engine:
    """A composed config (dict or DictConfig) -> the method's Engine, everything checked first."""
    from omegaconf import OmegaConf

    from .config import run_config

    plain = OmegaConf.to_container(cfg, resolve=True) if OmegaConf.is_config(cfg) else cfg
    return build_engines(run_config(plain), model_path).engine
