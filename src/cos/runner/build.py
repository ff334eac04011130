"""The one `build`: a checked RunConfig -> validated plans -> resolved model paths -> loaded members
-> Engines (the method, and the compare_with baseline on the same members).

Everything that can fail without loading a model fails first: plans, model names and folders,
devices, dtypes. Members are loaded once; the baseline engine shares them (they are reset per
generation, and the two engines run one after another).
"""

from __future__ import annotations

from dataclasses import dataclass

import logging

from ..byte_level.loading import byte_level_reason
from ..engine import Engine
from ..tokens import encode_text
from ..loading import (check_before_weights, check_device, check_vocabularies, load_member, load_tokenizer,
                       resolve_dtype)
from .config import RunConfig
from .resolve import resolve_models

log = logging.getLogger("cos.runner")


@dataclass
class Built:
    engine: Engine  # or, on backend=vllm, a VllmMethod (same interface: plan, generate, warm_up)
    baseline: Engine | None
    tokenizer: object
    paths: list[str]  # resolved member paths, config order
    owned: tuple = ()  # engines to close when the run ends (vLLM engines this build started)

    @property
    def byte_level(self) -> bool:
        """Members combined over bytes: prompts are encoded per member (ByteEngine.encode)."""
        return getattr(self.engine, "byte_level", False)

    def encode(self, text: str, chat_template: bool, max_prompt_len: int):
        """A prompt's ids for the engine: one list (token level), or one per member (over bytes)."""
        if self.byte_level:
            return self.engine.encode(text, chat_template, max_prompt_len)
        return encode_text(self.tokenizer, text, chat_template, max_prompt_len)

    def prompt_tokens(self, ids) -> int:
        """The prompt's length in the first member's tokens."""
        return len(ids[0]) if self.byte_level else len(ids)

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
    reason = byte_level_reason(run.method.byte_level, paths, tokenizers)
    if reason is not None:
        return build_byte_engines(run, paths, tokenizers, plan, baseline_plan, reason, loaded)
    if run.method.byte_options:
        raise ValueError(f"method.{', method.'.join(run.method.byte_options)} apply over bytes only (members with "
                         f"different tokenizers, or method.byte_level=true): unset them")
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


def build_byte_engines(run: RunConfig, paths: list[str], tokenizers: list, plan, baseline_plan, reason: str,
                       loaded: dict | None) -> Built:
    """Members with different tokenizers: ByteEngines over the same byte-level members (docs/byte_level.md)."""
    from ..byte_level.engine import DEFAULT_PRUNE, ByteEngine, check_plan
    from ..byte_level.loading import load_byte_member

    for p in (plan, baseline_plan):
        if p is not None:
            check_plan(p)
    if run.compile:
        raise ValueError("compile=true: members over bytes run eager (their token trees change every step); "
                         "set compile=false")
    log.info("%s: members combined over bytes: %s (docs/byte_level.md)", plan.method, reason)
    prune = run.method.byte_options.get("prune", DEFAULT_PRUNE)
    loaded = {} if loaded is None else loaded
    members = []
    for path, tokenizer, device, dtype in zip(paths, tokenizers, run.devices, run.dtypes):
        key = ("bytes", path, device, dtype, run.kernels, prune)
        if key not in loaded:
            loaded[key] = load_byte_member(path, tokenizer, device, dtype, run.kernels, prune)
        members.append(loaded[key])
    draft_bytes = run.method.byte_options.get("draft_bytes", 12)
    engine = ByteEngine(members, plan, tokenizers, run.threads, draft_bytes)
    baseline = None
    if baseline_plan is not None:
        n = baseline_plan.n_members
        baseline = ByteEngine(members[:n], baseline_plan, tokenizers[:n], run.threads, draft_bytes)
    return Built(engine, baseline, tokenizers[0], paths)


def build_engine(cfg, model_path: str | None = None) -> Engine:
    """A composed config (dict or DictConfig) -> the method's Engine, everything checked first."""
    from omegaconf import OmegaConf

    from .config import run_config

    plain = OmegaConf.to_container(cfg, resolve=True) if OmegaConf.is_config(cfg) else cfg
    return build_engines(run_config(plain), model_path).engine
