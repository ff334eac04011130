"""bench mix: weighted ensembles under sampling, side by side in one process: we, we_sd, we_chef, we_mix (ME),
we_mix_sd (the coin-first hybrid) on the same prompts (a benchmark, not a test).

    python -m scripts.bench mix                                   # packaged Qwen2.5-Coder 1.5B + 0.5B
    python -m scripts.bench mix --datasets humaneval gsm8k --prompts 10 --lams 0.5 0.3 --repeats 2
    python -m scripts.bench mix --equal-size             # c ≈ 1: the 0.5B beside a noisy copy
    python -m scripts.bench mix --tiny                   # checks the script itself (seconds)

Members in config order [model = 1.5B, extra = 0.5B]; λ is the 0.5B's weight (r = (1-λ) p_1.5B +
λ p_0.5B) and the 0.5B is the proposer of every method that drafts. `--equal-size`: model = a copy of
the 0.5B whose weights carry Gaussian noise (`--noise` × each tensor's std), the regime of the CoS
paper's equal-size WE pairs, where ME should reach about 2×. At T = 1 (default) for every λ and
dataset, each method runs on the same prompts and seeds after a warm-up; repeats are interleaved
(every method once, then again). A row: decode tokens/s (median over repeats), speedup over `we`
measured in the same run, α (acceptance against r; for we_mix_sd: λ + (1-λ)β), β (acceptance of a
drafted foreign position, Σ min(p_0.5B, p_1.5B); for we_sd: (α - λ) / (1 - λ)), c, the speedup the
cost model predicts (docs/algorithm.md §6; ME and the hybrid: cos/mixture.py) and measured / predicted,
the foreign positions the hybrid drafted per mixture round and its rounds of each kind (mixture | cos:
under `adaptive` it also runs CoS episodes, whose drafts then count in its α/β columns, pooled), and the
quality score (pass@1 / accuracy) with
its 95% Wilson interval over the first repeat's generations. Rows are appended to --out (jsonl) as
they are produced; the table is printed at the end.
"""

from __future__ import annotations

import statistics
from collections import Counter
from pathlib import Path

from . import common

METHODS = ("we", "we_sd", "we_chef", "we_mix", "we_mix_sd")


def add_args(ap) -> None:
    common.pair_args(ap, extra_help="the proposer")
    ap.add_argument("--equal-size", action="store_true", help="model = the extra model + weight noise (c ≈ 1)")
    ap.add_argument("--noise", type=float, default=0.02, help="--equal-size: noise scale, × each weight's std")
    ap.add_argument("--tiny", action="store_true", help="random tiny members, 2 token-id prompts: checks the script")
    ap.add_argument("--datasets", nargs="+", default=["humaneval", "gsm8k"])
    common.data_args(ap)
    ap.add_argument("--prompts", type=int, default=5)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--lams", nargs="+", type=float, default=[0.5, 0.3], help="the proposer's (0.5B's) weight")
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    ap.add_argument("--gamma", type=int, default=5)
    ap.add_argument("--schedule", default="adaptive", choices=["fixed", "adaptive"],
                    help="of the methods that draft (adaptive: what users get; we_mix_sd picks m per round)")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--threads", default="auto", help="auto | an int | none (torch's own)")
    ap.add_argument("--kernels", default="auto", choices=list(common.KERNELS), help="the row-invariant CPU kernels (auto = on wherever they run)")
    ap.add_argument("--out", default="results/bench_mix.jsonl")


def plan_kwargs(name: str, lam: float, gamma: int, schedule: str) -> dict:
    """The 0.5B (member 1) proposes; we_chef starts from it with γ [1, γ]."""
    drafts = {"we_sd": dict(gamma=gamma, proposer=1, bonus="exact", schedule=schedule),
              "we_chef": dict(gamma=[1, gamma], schedule=schedule),
              "we_mix_sd": dict(gamma=gamma, proposer=1, schedule=schedule)}
    return dict(method=name, lam=lam, **drafts.get(name, {}))


def add_noise(model, scale: float, seed: int = 0) -> None:
    """w += scale · std(w) · N(0, 1), every weight tensor: a relative of the model (c ≈ 1, β < 1)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            p.add_((scale * p.float().std() * noise).to(p.dtype))


def load_members(args) -> tuple[list, object]:
    from cos.loading import load_member, load_tokenizer, use_kernels
    from cos.member import Member

    if args.tiny:  # random tiny Llamas, no tokenizer: the script's own check
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM

        config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, initializer_range=0.3)
        torch.manual_seed(1)
        small = LlamaForCausalLM(config).eval()
        big = LlamaForCausalLM(config).eval()
        big.load_state_dict(small.state_dict())
        add_noise(big, 0.3)
        return [Member(big, name="tiny-model"), Member(small, name="tiny-extra")], None
    kernels = common.KERNELS[args.kernels]
    extra = common.model_dir(args.extra)
    if args.equal_size:  # the 0.5B and a noisy copy: the noise goes in before any kernel packs the weights
        copy = load_member(extra, "cpu", args.dtype, kernels=False)
        add_noise(copy.model, args.noise)
        use_kernels(copy.model, kernels, f"{extra} + noise")
        copy.name = f"{Path(extra).name}+noise{args.noise:g}"
        return [copy, load_member(extra, "cpu", args.dtype, kernels=kernels)], load_tokenizer(extra)
    model = common.model_dir(args.model)
    return [load_member(p, "cpu", args.dtype, kernels=kernels) for p in (model, extra)], load_tokenizer(model)


def load_prompts(args) -> dict[str, tuple[object, list]]:
    """dataset -> (adapter, examples); --tiny: literal token-id prompts, no scoring."""
    if args.tiny:
        return {"tiny": (None, [[3, 17, 42, 8, 23], [5, 9, 1, 30]][: args.prompts])}
    return {name: common.load_examples(name, args.prompts, args.data_root) for name in args.datasets}


def generate(engine, ds, example, args, seed: int):
    prompt = example if ds is None else example.prompt
    stop = [] if ds is None else ds.stop_strings
    return engine.generate(prompt, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                           top_p=args.top_p, seed=seed, stop=stop, eos_token_ids=[] if ds is None else None)


def summarize(dataset: str, lam: float, name: str, runs: list[list], rates: list[float], base_rate: float,
              ds, examples) -> dict:
    stats = [out.stats for out in runs[0]]
    drafted, accepted = sum(s.drafted for s in stats), sum(s.accepted for s in stats)
    rate = accepted / drafted if drafted else None
    alpha = beta = None
    if name == "we_mix_sd" and rate is not None:
        beta, alpha = rate, lam + (1 - lam) * rate
    elif name in ("we_sd", "we_chef") and rate is not None:
        alpha = rate
        beta = (rate - lam) / (1 - lam) if name == "we_sd" and lam < 1 else None
    preds = [s.predicted_speedup for s in stats if s.predicted_speedup]
    costs = [s.cost_ratio for s in stats if s.cost_ratio]
    tps = statistics.median(rates)
    row = dict(dataset=dataset, lam=lam, method=name, tokens_per_s=round(tps, 3),
               speedup=round(tps / base_rate, 3) if base_rate else None,
               alpha=None if alpha is None else round(alpha, 3), beta=None if beta is None else round(beta, 3),
               c=round(statistics.median(costs), 3) if costs else None,
               predicted=round(statistics.median(preds), 3) if preds else None,
               calls=[sum(s.members[i].calls for s in stats) for i in range(len(stats[0].members))],
               tokens=sum(s.new_tokens for s in stats))
    if row["predicted"] and row["speedup"] and name != "we":
        row["measured_over_predicted"] = round(row["speedup"] / row["predicted"], 3)
    if name == "we_mix_sd":  # foreign positions drafted per mixture round (the schedule's m) -> rounds
        row["foreign_per_round"] = dict(sorted(sum((Counter(s.draft_lengths) for s in stats), Counter()).items()))
        row["round_kinds"] = dict(sum((Counter(s.round_kinds) for s in stats), Counter()))  # mixture | cos -> rounds
    if ds is not None:
        from cos.report.intervals import wilson

        scores = [ds.score(ex, out.text) for ex, out in zip(examples, runs[0])]
        metric, value = next(iter(ds.aggregate(scores).items()))
        low, high = wilson(value * len(scores), len(scores))
        row.update(quality=metric, score=round(value, 3), ci95=[round(low, 3), round(high, 3)])
    return row


def run(args) -> None:
    from cos import Engine
    from cos.engine import plan_from_kwargs

    if args.temperature <= 0:
        raise SystemExit("error: --temperature must be > 0: we_mix and we_mix_sd are exact under sampling only")
    methods = ["we"] + [m for m in args.methods if m != "we"]  # the baseline of every speedup
    prompts = load_prompts(args)
    members, tok = load_members(args)
    threads = common.threads_option(args.threads, none_word="none")
    rows = []
    for lam in args.lams:
        engines = {m: Engine(members, plan_from_kwargs(n_members=2, **plan_kwargs(m, lam, args.gamma, args.schedule)),
                             tok, threads) for m in methods}
        for dataset, (ds, examples) in prompts.items():
            for m in methods:  # warm-up, untimed
                engines[m].generate(examples[0] if ds is None else examples[0].prompt, max_new_tokens=8,
                                    temperature=args.temperature, seed=0)

            def measure(m, rep):
                """(the generations, decode tokens/s) of one pass of method m over the prompts."""
                outs = [generate(engines[m], ds, ex, args, seed=i) for i, ex in enumerate(examples)]
                rate = sum(o.stats.new_tokens for o in outs) / sum(o.stats.wall_seconds for o in outs)
                print(f"[{dataset} λ={lam:g} repeat {rep + 1}/{args.repeats}] {m}: {rate:.2f} tok/s", flush=True)
                return outs, rate

            meter = common.load_meter()
            passes = common.interleaved(methods, args.repeats, measure)
            load = meter.stop().as_dict()
            base = statistics.median(rate for _, rate in passes["we"])
            for m in methods:
                runs, rates = [outs for outs, _ in passes[m]], [rate for _, rate in passes[m]]
                row = summarize(dataset, lam, m, runs, rates, base, ds, examples)
                row.update(temperature=args.temperature, gamma=args.gamma, schedule=args.schedule,
                           members=[x.name for x in members], equal_size=args.equal_size, load=load)
                rows.append(row)
                common.append_row(args.out, row)
    print_table(rows)


def print_table(rows: list[dict]) -> None:
    cols = ["dataset", "lam", "method", "tokens_per_s", "speedup", "alpha", "beta", "c", "predicted",
            "measured_over_predicted", "foreign_per_round", "round_kinds", "score", "ci95"]
    print(common.markdown_table(cols, (["" if r.get(c) is None else str(r[c]) for c in cols] for r in rows)))
