"""One prompt from the command line (main_case.py): the text, then the statistics.

With compare_with, the baseline runs first on the same prompt and the speedup and greedy identity
are printed too. The result is also saved as case.json in the output folder.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from .build import build_engines
from .config import run_config
from .results import prepare_output
from .run import generate_pair, generation_options, warm_up

CASE_MAX_TOKENS = 128  # when method.generate.max_tokens is null


def run_case(cfg: Mapping, out_dir: Path, model_path: str | None = None, loaded: dict | None = None) -> dict:
    """loaded: models (and vLLM engines) already loaded in this process, reused (build_engines)."""
    run = run_config(cfg)
    text = cfg.get("input")
    if not isinstance(text, str) or not text:
        raise ValueError("input is not set: give input='<your prompt>'")
    stop = cfg.get("stop") or []
    if isinstance(stop, str):
        stop = [stop]
    prepare_output(out_dir, cfg)
    built = build_engines(run, model_path, loaded=loaded)
    try:
        return _generate_case(built, run, text, stop, out_dir)
    finally:
        built.close()  # vLLM engines free their KV cache now, not at garbage collection


def _generate_case(built, run, text: str, stop: list[str], out_dir: Path) -> dict:
    ids = built.encode(text, run.dataset["chat_template"], run.max_prompt_len)
    options = generation_options(run, CASE_MAX_TOKENS, stop, run.seed)
    if run.warmup:
        warm_up(built, ids, options, run.warmup)
    result: dict = {"input": text, "backend": run.backend, "prompt_tokens": built.prompt_tokens(ids),
                    "method": built.engine.plan.method, **generate_pair(built, ids, options)}
    print(result["output"])
    print("-" * 60)
    for key in ("method", "prompt_tokens", "tokens", "time", "tokens_per_second", "bytes_per_second", "rounds",
                "drafted", "accepted", "acceptance_rate", "mean_acceptance_length", "cost_ratio", "predicted_speedup",
                "stop_reason"):
        print(f"{key:>24}: {_show(result[key])}")
    if built.baseline is not None:
        b = result["baseline"]
        speedup = result["tokens_per_second"] / b["tokens_per_second"] if b["tokens_per_second"] else None
        result["measured_speedup"] = speedup
        print(f"{'vs ' + b['method']:>24}: {b['tokens_per_second']:.2f} tokens/s, speedup {_show(speedup)}, "
              f"greedy identical: {_show(result['identical'])}"
              + (f" (first difference at token {result['first_difference']})" if result["identical"] is False else ""))
    (out_dir / "case.json").write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return result


def _show(v) -> str:
    if isinstance(v, float):
        return f"{v:.3f}"
    return "-" if v is None else str(v)
