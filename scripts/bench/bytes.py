"""bench bytes: ensembles across tokenizers over bytes (cos.byte_level), side by side in one process: the
standard methods over bytes (we, cd: every member's byte law at every byte, the naive byte-level ensemble)
against the accelerated ones (we_sd, cd_sd: the proposer drafts bytes in its own tokens; we_chef, cd_chef:
every member may draft, and under the adaptive schedule each round's kind, a draft by one member or a naive
step, is chosen by measured bytes/s), and each member alone at token level for scale (a benchmark, not a test).

    python -m scripts.bench bytes                                   # packaged Qwen2.5-Coder-0.5B + SmolLM2-135M
    python -m scripts.bench bytes --datasets humaneval gsm8k --prompts 4 --max-bytes 128 --temperatures 0 1
    python -m scripts.bench bytes --methods we we_sd we_chef --schedule fixed --proposer 0
    python -m scripts.bench bytes --busy                            # with a process spinning beside it

Members in config order (--members); r = the method's combination (we: equal weights; cd: the first minus
α × the second) of their byte-level laws. Every method runs through cos.byte_level.ByteEngine on the same
byte-level members, prompts and seeds after a warm-up (each engine keeps its measured choice of rounds
across prompts, as in a run); repeats are interleaved. A row: bytes/s (median over repeats), the ratio over
the standard method measured in the same run, the rounds of each kind, forwards per byte and seconds per
forward of each member, bytes per round, the pruned mass per byte (a bound on the total-variation error
pruning caused), and the machine's load. Rows are appended to --out (jsonl) as they are produced; the table
is printed at the end.
"""

from __future__ import annotations

import argparse
import statistics
import time

from . import common

MEMBERS = ("qwen2.5-coder-0.5b-instruct", "smollm2-135m-instruct")  # [expert / drafter, amateur]


def add_args(ap) -> None:
    ap.add_argument("--members", nargs="+", default=list(MEMBERS), help="packaged names or model folders")
    ap.add_argument("--datasets", nargs="+", default=["humaneval"])
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--max-bytes", type=int, default=128)
    ap.add_argument("--temperatures", type=float, nargs="+", default=[0.0])
    ap.add_argument("--methods", nargs="+", default=["we", "we_chef", "cd", "cd_chef"],
                    choices=["we", "we_sd", "we_chef", "cd", "cd_sd", "cd_chef"])
    ap.add_argument("--alone", action=argparse.BooleanOptionalAction, default=True,
                    help="each member alone at token level, for scale")
    ap.add_argument("--alpha", type=float, default=0.1, help="cd: the second member's weight")
    ap.add_argument("--prune", type=float, default=1e-4, help="drop tokenizations below this weight (0: exact)")
    ap.add_argument("--proposer", type=int, default=0, help="*_sd: the member that drafts; *_chef: the first to")
    ap.add_argument("--schedule", default="adaptive", choices=["adaptive", "fixed"])
    ap.add_argument("--draft-bytes", type=int, default=12)
    ap.add_argument("--busy", action="store_true", help="a process spins (while True: pass) for the whole run")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--threads", default="auto",
                    help="auto (the engines' default: measured per member, 1 thread where another process "
                         "competes) or an int (fixed: under --busy a fixed 2 cost 25-60x per forward here)")
    ap.add_argument("--out", default=None, help="jsonl rows, appended as produced")
    common.data_args(ap)


def load_members(args):
    import torch
    from transformers import AutoTokenizer

    from cos.byte_level.loading import load_byte_member

    args.threads = common.threads_option(args.threads)
    if isinstance(args.threads, int):
        torch.set_num_threads(args.threads)
    members, tokenizers = [], []
    for name in args.members:
        path = common.model_dir(name)
        tokenizers.append(AutoTokenizer.from_pretrained(path))
        members.append(load_byte_member(path, tokenizers[-1], "cpu", args.dtype, prune=args.prune))
        members[-1].name = members[-1].member.name = name
    return members, tokenizers


def engines(args, members, tokenizers) -> dict:
    """method -> a ByteEngine over the shared byte-level members."""
    from cos.byte_level.engine import ByteEngine
    from cos.engine import plan_from_kwargs

    out = {}
    for method in args.methods:
        kw = dict(alpha=args.alpha) if method.startswith("cd") else {}
        if method != method.split("_")[0]:
            kw.update(proposer=args.proposer, schedule=args.schedule)
        plan = plan_from_kwargs(method, len(members), **kw)
        out[method] = ByteEngine(members, plan, tokenizers, threads=args.threads, draft_bytes=args.draft_bytes)
    return out


def token_level(member, prompt_ids, max_bytes: int, temperature: float, seed: int) -> dict:
    """The member alone, token by token (its own decode loop), until max_bytes bytes or its end token."""
    import torch

    from cos.sampling import SamplingParams, pick, to_probs

    params, generator = SamplingParams(temperature=temperature), torch.Generator().manual_seed(seed)
    m = member.member
    seq = torch.tensor(prompt_ids)
    m.prefill(seq)
    data, start = b"", time.perf_counter()
    while len(data) < max_bytes:
        token = int(pick(to_probs(m.score(seq, 1)[-1], params), params.greedy, generator))
        if token in member.vocab.end_ids:
            break
        data += member.vocab.pieces[token]
        seq = torch.cat([seq, torch.tensor([token])])
    seconds = time.perf_counter() - start
    return {"bytes": len(data), "seconds": seconds, "rounds": m.stats.calls, "forwards": [m.stats.calls],
            "call_seconds": [m.stats.seconds_per_call], "pruned": [0.0]}


def byte_level(engine, prompts, args, temperature: float, seed: int) -> dict:
    out = engine.generate(prompts, max_new_bytes=args.max_bytes, max_new_tokens=None, temperature=temperature,
                          seed=seed)
    s = out.stats
    return {"bytes": s.new_bytes, "seconds": s.wall_seconds, "rounds": s.rounds or s.new_bytes,
            "kinds": s.round_kinds, "forwards": s.byte_level["forwards"],
            "call_seconds": [m.seconds_per_call for m in s.members], "pruned": s.byte_level["pruned"],
            "text": out.text}


def run(args) -> None:
    from .busy import competitor

    members, tokenizers = load_members(args)
    names = list(args.methods) + ([f"alone_{i}" for i in range(len(members))] if args.alone else [])
    table = []
    with competitor("steady" if args.busy else "quiet"):
        for dataset in args.datasets:
            _, examples = common.load_examples(dataset, args.prompts, args.data_root)
            prompts = [[tok(ex.prompt)["input_ids"] for tok in tokenizers] for ex in examples]
            for temperature in args.temperatures:
                # fresh engines per cell, as a run has: a measured choice of rounds made at T = 1 on HumanEval
                # would otherwise carry its stale rates into the next cell
                byte_engines = engines(args, members, tokenizers)
                table += measure_cell(args, dataset, temperature, prompts, names, members, byte_engines)
    cols = ["dataset", "temperature", "config", "bytes_per_s", "vs_standard", "round_kinds", "forwards_per_byte",
            "seconds_per_forward", "bytes_per_round", "pruned_per_byte", "others_cores"]
    print(common.markdown_table(cols, ([f"{r[c]:.1e}" if c == "pruned_per_byte" else round(r["load"]["others_cores"] or 0, 2)
                                        if c == "others_cores" else r[c] for c in cols] for r in table)))


def measure_cell(args, dataset: str, temperature: float, prompts, names, members, byte_engines) -> list[dict]:
    """Every method on the prompts at one temperature, interleaved; rows appended to --out as produced."""
    meter = common.load_meter()

    def measure(name, rep):
        seeds = [rep * 100 + i for i in range(len(prompts))]
        if name.startswith("alone_"):
            k = int(name.split("_")[1])
            return [token_level(members[k], ids[k], args.max_bytes, temperature, s) for ids, s in zip(prompts, seeds)]
        return [byte_level(byte_engines[name], ids, args, temperature, s) for ids, s in zip(prompts, seeds)]

    for name in args.methods:  # warm-up on every prompt: first-call costs, and each engine's first measurements
        for ids in prompts:     # of its kinds of round (a run's engine has measured them over its earlier prompts)
            byte_level(byte_engines[name], ids, args, temperature, 0)
    results = common.interleaved(names, args.repeats, measure)
    load = meter.stop().as_dict()
    speeds = {name: statistics.median(sum(r["bytes"] for r in rows) / sum(r["seconds"] for r in rows)
                                      for rows in reps) for name, reps in results.items()}
    out = []
    for name, reps in results.items():
        rows = [r for rep in reps for r in rep]
        n_bytes = sum(r["bytes"] for r in rows)
        standard = speeds.get(name.split("_")[0])
        kinds: dict = {}
        for r in rows:
            for kind, n in r.get("kinds", {}).items():
                kinds[kind] = kinds.get(kind, 0) + n
        row = {
            "dataset": dataset, "temperature": temperature, "config": name, "members": args.members,
            "prune": args.prune, "proposer": args.proposer, "schedule": args.schedule, "draft_bytes": args.draft_bytes,
            "busy": args.busy, "threads": args.threads, "bytes_per_s": round(speeds[name], 2),
            "vs_standard": round(speeds[name] / standard, 3) if standard and not name.startswith("alone") else None,
            "round_kinds": kinds,
            "forwards_per_byte": [round(sum(r["forwards"][j] for r in rows) / max(n_bytes, 1), 3)
                                  for j in range(len(rows[0]["forwards"]))],
            "seconds_per_forward": [round(statistics.mean(r["call_seconds"][j] for r in rows), 4)
                                    for j in range(len(rows[0]["call_seconds"]))],
            "bytes_per_round": round(n_bytes / max(sum(r["rounds"] for r in rows), 1), 2),
            "pruned_per_byte": max(sum(r["pruned"][j] for r in rows) / max(n_bytes, 1)
                                   for j in range(len(rows[0]["pruned"]))),
            "bytes": n_bytes, "load": load, "sample": rows[0].get("text", "")[:80],
        }
        common.append_row(args.out, row)
        out.append(row)
        print(f"{dataset} T={temperature} {name}: {row['bytes_per_s']} B/s vs standard {row['vs_standard']} "
              f"kinds {kinds} fwd/B {row['forwards_per_byte']} s/fwd {row['seconds_per_forward']} "
              f"B/round {row['bytes_per_round']} pruned/B {row['pruned_per_byte']:.1e}", flush=True)
    return out
