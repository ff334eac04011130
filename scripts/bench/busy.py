"""bench busy: speed on a quiet and on a busy CPU, side by side, with competitors this script starts itself.

    python -m scripts.bench busy                                   # cd, cd_chef; quiet, steady, bursty
    python -m scripts.bench busy --methods cd cd_chef we we_chef --prompts 2 --max-new-tokens 32
    python -m scripts.bench busy --conditions quiet               # quiet mode: both runtimes, nothing else

Users' machines are busy. Three conditions, each measured in this one process on the packaged Qwen
pair (1.5B expert / target, 0.5B amateur / draft), bf16, greedy, HumanEval prompts:
  quiet   nothing else runs;
  steady  one process spins (`while True: pass`) for the whole condition;
  bursty  one process launches short torch jobs back to back (import torch, a few matmuls, exit),
          as a test suite or a build does.
Two member runtimes run interleaved in every condition, on the same weights:
  torch    transformers' DynamicCache, torch's default threads (one per core), the paper's fixed γ,
           torch's bf16 linear;
  cos      the preallocated cache, threads="auto" (threads.py), schedule="adaptive" (schedule.py), the
           row-invariant CPU kernels (cos.kernels: linear and attention; installed before each of its
           generations, removed after).
Each row: tokens/s (decode), the ratio over the standard method of the same runtime and condition,
the share of the quiet speed kept, c, the members' seconds per call, the draft lengths the schedule
chose, and how many cores other processes took meanwhile. Rows are appended to --out (jsonl) as they
are produced; the table is printed at the end.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import subprocess
import sys
import time

from . import common

METHODS = {
    "cd": dict(method="cd", alpha=0.1),
    "cd_chef": dict(method="cd_chef", alpha=0.1, gamma=[1, 5]),
    "we": dict(method="we", lam=0.5),
    "we_chef": dict(method="we_chef", lam=0.5, gamma=[1, 5]),
}
STANDARD = {"cd": "cd", "cd_chef": "cd", "we": "we", "we_chef": "we"}
RUNTIMES = ("torch", "cos")
CONDITIONS = ("quiet", "steady", "bursty")
SPIN = "while True: pass"
BURST = ("import subprocess, sys\n"
         "job = 'import torch\\nx = torch.randn(384, 384)\\nfor _ in range(300): x = torch.tanh(x @ x)'\n"
         "while True: subprocess.run([sys.executable, '-c', job])\n")


def runtimes() -> dict[str, tuple]:
    """name -> (cache, threads, schedule)."""
    from cos.threads import available_cores

    return {"torch": ("dynamic", available_cores(), "fixed"), "cos": ("preallocated", "auto", "adaptive")}


def add_args(ap) -> None:
    common.pair_args(ap)
    ap.add_argument("--methods", nargs="+", default=["cd", "cd_chef"], choices=list(METHODS))
    ap.add_argument("--conditions", nargs="+", default=list(CONDITIONS), choices=list(CONDITIONS))
    ap.add_argument("--runtimes", nargs="+", default=list(RUNTIMES), choices=list(RUNTIMES))
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    common.data_args(ap)
    ap.add_argument("--out", default="results/bench_busy.jsonl")


@contextlib.contextmanager
def competitor(condition: str):
    """Start the condition's competing process (none when quiet); stop it, and its children, after."""
    code = {"quiet": None, "steady": SPIN, "bursty": BURST}[condition]
    proc = None if code is None else subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        time.sleep(0 if proc is None else 2.0)  # let it reach its steady state
        yield
    finally:
        if proc is not None:
            os.killpg(proc.pid, 9)
            proc.wait()


def build(models, tok, methods):
    """engines[(runtime, method)]: each runtime has its own Member objects over the same weights."""
    from cos import Engine
    from cos.engine import plan_from_kwargs
    from cos.member import Member

    engines = {}
    for runtime, (cache, threads, schedule) in runtimes().items():
        members = [Member(m, name=n, cache=cache) for m, n in zip(models, ("1.5B", "0.5B"))]
        for name in methods:
            kw = dict(METHODS[name])
            if name.endswith("_chef"):
                kw["schedule"] = schedule
            engines[runtime, name] = Engine(members, plan_from_kwargs(n_members=2, **kw), tok, threads)
    return engines


def generate(engine, runtime: str, ids, max_new: int):
    from cos.kernels import install_row_kernels, row_invariance, uninstall_row_kernels

    for m in engine.members:  # the kernels are per model: on for the cos runtime, off for torch's
        (install_row_kernels if runtime == "cos" else uninstall_row_kernels)(m.model)
        m.row_invariance = row_invariance(m.model)  # both runtimes share the weights: say which ops run now
    out = engine.generate(ids, max_new_tokens=max_new, temperature=0, eos_token_ids=[])
    return out.stats


def run(args) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from cos.loading import load_tokenizer, resolve_dtype

    torch.set_grad_enabled(False)
    for name in args.methods:
        if STANDARD[name] not in args.methods:
            raise SystemExit(f"error: {name} needs its standard method {STANDARD[name]} in --methods (the ratio)")

    paths = [common.model_dir(args.model), common.model_dir(args.extra)]
    tok = load_tokenizer(paths[0])
    models = [AutoModelForCausalLM.from_pretrained(p, dtype=resolve_dtype("bfloat16")).eval() for p in paths]
    bytes_ratio = sum(p.numel() for p in models[1].parameters()) / sum(p.numel() for p in models[0].parameters())
    engines = {k: e for k, e in build(models, tok, args.methods).items() if k[0] in args.runtimes}
    _, examples = common.load_examples("humaneval", args.prompts, args.data_root)
    prompts = [tok(ex.prompt)["input_ids"] for ex in examples]
    for (runtime, _), engine in engines.items():  # warm-up, untimed: first calls, thread pools, first probes
        for _ in range(2):
            generate(engine, runtime, prompts[0], 12)
    rows = []
    for condition in args.conditions:
        with competitor(condition):
            meter = common.load_meter()
            stats = {key: [] for key in engines}
            for ids in prompts:  # interleaved: every runtime x method on a prompt, then the next prompt
                for key, engine in engines.items():
                    stats[key].append(generate(engine, key[0], ids, args.max_new_tokens))
                    print(f"{condition:7s} {key[0]:6s} {key[1]:8s} {stats[key][-1].tokens_per_second:6.2f} tok/s",
                          flush=True)
            load = meter.stop()
        for (runtime, name), runs in stats.items():
            row = summarize(condition, runtime, name, runs, load, bytes_ratio)
            rows.append(row)
            common.append_row(args.out, row)
    print_table(rows)


def summarize(condition, runtime, name, runs, load, bytes_ratio) -> dict:
    from cos.threads import available_cores

    tokens = sum(s.new_tokens for s in runs)
    seconds = sum(s.wall_seconds for s in runs)
    calls = lambda i: sum(s.members[i].calls for s in runs)
    secs = lambda i: sum(s.members[i].seconds for s in runs)
    per_call = [secs(i) / calls(i) if calls(i) else None for i in range(2)]
    lengths: dict[int, int] = {}
    for s in runs:
        for k, v in s.draft_lengths.items():
            lengths[k] = lengths.get(k, 0) + v
    cs = [s.cost_ratio for s in runs if s.cost_ratio is not None]
    return {"condition": condition, "runtime": runtime, "method": name, "tokens": tokens,
            "tokens_per_second": tokens / seconds, "c": statistics.median(cs) if cs else None,
            "c_over_bytes": statistics.median(cs) / bytes_ratio if cs else None,
            "seconds_per_call": {"1.5B": per_call[0], "0.5B": per_call[1]},
            "acceptance_rate": (sum(s.accepted for s in runs) / max(1, sum(s.drafted for s in runs))),
            "draft_lengths": lengths, "threads": runs[-1].threads, "load": load.as_dict(),
            "torch_threads_default": available_cores(), "date": time.strftime("%Y-%m-%d %H:%M")}


def print_table(rows: list[dict]) -> None:
    quiet = {(r["runtime"], r["method"]): r["tokens_per_second"] for r in rows if r["condition"] == "quiet"}
    rate = {(r["condition"], r["runtime"], r["method"]): r["tokens_per_second"] for r in rows}
    fmt = lambda v, spec=".2f": "-" if v is None else format(v, spec)
    cells = []
    for r in rows:
        std = rate.get((r["condition"], r["runtime"], STANDARD[r["method"]]))
        q = quiet.get((r["runtime"], r["method"]))
        spc = r["seconds_per_call"]
        cells.append([r["condition"], r["runtime"], r["method"], fmt(r["tokens_per_second"]),
                      fmt(r["tokens_per_second"] / std if std else None), fmt(r["tokens_per_second"] / q if q else None),
                      fmt(r["c"]), fmt(r["c_over_bytes"]), fmt(spc["1.5B"], ".3f"), fmt(spc["0.5B"], ".3f"),
                      r["draft_lengths"] or "-", fmt(r["load"]["others_cores"], ".1f")])
    header = ["condition", "runtime", "method", "tok/s", "/ standard", "share of quiet", "c", "c / bytes",
              "s per call 1.5B", "s per call 0.5B", "draft lengths", "other processes (cores)"]
    print("\n" + common.markdown_table(header, cells))
