"""bench bytes: ensembles across tokenizers over bytes (cos.byte_level), side by side in one process: the
naive byte-level ensemble (every member's byte law at every byte) against speculation over bytes (one member
drafts bytes in its own tokens, every member's laws along the draft, verified against r), and each member
alone at token level for scale (a benchmark, not a test).

    python -m scripts.bench bytes                                   # packaged Qwen2.5-Coder-0.5B + SmolLM2-135M
    python -m scripts.bench bytes --datasets humaneval gsm8k --prompts 4 --max-bytes 128 --temperatures 0 1
    python -m scripts.bench bytes --prune 1e-6                      # closer to exact, more forwards

Members in config order (--members); r = the combination (--combinations: we = equal weights, cd = the
first minus α × the second) of their byte-level laws. Every configuration runs on the same prompts and seeds
after a warm-up; repeats are interleaved. A row: bytes/s (median over repeats), the speedup of speculation
over the naive ensemble measured in the same run, forwards per byte and seconds per forward of each member,
bytes emitted per round, the pruned mass (a bound on the total-variation error pruning caused, per byte),
and the machine's load. Rows are appended to --out (jsonl) as they are produced; the table is printed at the
end.
"""

from __future__ import annotations

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
    ap.add_argument("--combinations", nargs="+", default=["we"], choices=["we", "cd"])
    ap.add_argument("--alpha", type=float, default=0.1, help="cd: the second member's weight")
    ap.add_argument("--prune", type=float, default=1e-4, help="drop tokenizations below this weight (0: exact)")
    ap.add_argument("--drafter", type=int, default=0, help="the member that drafts (index in --members)")
    ap.add_argument("--draft-bytes", type=int, default=12)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=None, help="jsonl rows, appended as produced")
    common.data_args(ap)


def load_members(args):
    import torch
    from transformers import AutoTokenizer

    from cos.byte_level import ByteMember, TokenBytes
    from cos.loading import load_member

    torch.set_num_threads(args.threads)
    members, tokenizers = [], []
    for name in args.members:
        path = common.model_dir(name)
        tokenizer = AutoTokenizer.from_pretrained(path)
        member = load_member(path, device="cpu", dtype=args.dtype)
        member.name = name
        ends = {tokenizer.eos_token_id, *([member.model.generation_config.eos_token_id] if isinstance(
            member.model.generation_config.eos_token_id, int) else member.model.generation_config.eos_token_id or [])}
        vocab = TokenBytes.from_tokenizer(tokenizer, member.vocab_size, sorted(i for i in ends if i is not None))
        members.append(ByteMember(member, vocab, prune=args.prune, name=name))
        tokenizers.append(tokenizer)
    return members, tokenizers


def combination(name: str, n: int, alpha: float):
    from cos import Contrastive, Mean

    return Mean(n_members=n) if name == "we" else Contrastive(alpha=alpha)


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


def byte_level(kind, members, comb, prompts, args, temperature: float, seed: int) -> dict:
    from cos import SamplingParams
    from cos.byte_level import generate_naive, generate_speculative

    params = SamplingParams(temperature=temperature)
    start = time.perf_counter()
    if kind == "naive":
        out = generate_naive(members, comb, prompts, args.max_bytes, params, seed=seed)
    else:
        out = generate_speculative(members, comb, prompts, args.max_bytes, params, seed=seed,
                                   drafter=args.drafter, draft_bytes=args.draft_bytes)
    seconds = time.perf_counter() - start
    return {"bytes": len(out.data), "seconds": seconds, "rounds": out.rounds,
            "forwards": [m.stats.forwards for m in members],
            "call_seconds": [m.member.stats.seconds_per_call for m in members],
            "pruned": [m.stats.pruned for m in members], "text": out.text}


def run(args) -> None:
    members, tokenizers = load_members(args)
    names = [f"{c}_naive" for c in args.combinations] + [f"{c}_spec" for c in args.combinations]
    names += [f"alone_{i}" for i in range(len(members))]
    table = []
    for dataset in args.datasets:
        _, examples = common.load_examples(dataset, args.prompts, args.data_root)
        prompts = [[tok(ex.prompt)["input_ids"] for tok in tokenizers] for ex in examples]
        for temperature in args.temperatures:
            meter = common.load_meter()

            def measure(name, rep):
                rows = []
                for i, ids in enumerate(prompts):
                    if name.startswith("alone_"):
                        k = int(name.split("_")[1])
                        rows.append(token_level(members[k], ids[k], args.max_bytes, temperature, seed=rep * 100 + i))
                    else:
                        comb_name, kind = name.split("_")
                        comb = combination(comb_name, len(members), args.alpha)
                        rows.append(byte_level(kind, members, comb, ids, args, temperature, seed=rep * 100 + i))
                return rows

            for name in names:  # warm-up: kernels, first-call costs
                if not name.startswith("alone_"):
                    comb = combination(name.split("_")[0], len(members), args.alpha)
                    byte_level(name.split("_")[1], members, comb, prompts[0], args, temperature, 0)
            results = common.interleaved(names, args.repeats, measure)
            load = meter.stop().as_dict()
            speeds = {name: statistics.median(sum(r["bytes"] for r in rows) / sum(r["seconds"] for r in rows)
                                              for rows in reps) for name, reps in results.items()}
            for name, reps in results.items():
                rows = reps[0]
                n_bytes = sum(r["bytes"] for r in rows)
                naive = speeds.get(name.replace("_spec", "_naive"))
                row = {
                    "dataset": dataset, "temperature": temperature, "config": name, "members": args.members,
                    "prune": args.prune, "drafter": args.drafter, "draft_bytes": args.draft_bytes,
                    "bytes_per_s": round(speeds[name], 2),
                    "vs_naive": round(speeds[name] / naive, 3) if name.endswith("_spec") and naive else None,
                    "forwards_per_byte": [round(sum(r["forwards"][j] for r in rows) / max(n_bytes, 1), 3)
                                          for j in range(len(rows[0]["forwards"]))],
                    "seconds_per_forward": [round(statistics.mean(r["call_seconds"][j] for r in rows), 4)
                                            for j in range(len(rows[0]["call_seconds"]))],
                    "bytes_per_round": round(n_bytes / max(sum(r["rounds"] for r in rows), 1), 2),
                    "pruned_per_byte": max(sum(r["pruned"][j] for r in rows) / max(n_bytes, 1)
                                           for j in range(len(rows[0]["pruned"]))),
                    "bytes": n_bytes, "load": load,
                    "sample": rows[0].get("text", "")[:80],
                }
                common.append_row(args.out, row)
                table.append(row)
                print(f"{dataset} T={temperature} {name}: {row['bytes_per_s']} B/s vs naive {row['vs_naive']} "
                      f"fwd/B {row['forwards_per_byte']} s/fwd {row['seconds_per_forward']} "
                      f"B/round {row['bytes_per_round']} pruned/B {row['pruned_per_byte']:.1e}", flush=True)
    cols = ["dataset", "temperature", "config", "bytes_per_s", "vs_naive", "forwards_per_byte",
            "seconds_per_forward", "bytes_per_round", "pruned_per_byte", "others_cores"]
    print(common.markdown_table(cols, ([f"{r[c]:.1e}" if c == "pruned_per_byte" else round(r["load"]["others_cores"] or 0, 2)
                                        if c == "others_cores" else r[c] for c in cols] for r in table)))
