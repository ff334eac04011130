"""bench real: side-by-side speed of every method on a real pair, one process, same prompts.

    python -m scripts.bench real                                  # packaged Qwen2.5-Coder 1.5B + 0.5B
    python -m scripts.bench real --datasets humaneval gsm8k --prompts 3 --temperatures 0 1 --repeats 3

Members in config order [model = 1.5B (expert / target), extra = 0.5B (amateur / draft)]. For each
dataset x temperature, every method runs on the same prompts after a warm-up; a row reports tokens/s
(decode: total tokens / total decode time, prefill excluded; and end to end; medians over repeats),
speedup over the method's standard counterpart measured in the same run, acceptance α, cost ratio c,
the speedup the cost model predicts (docs/algorithm.md §6) and measured / predicted, and the machine's load meanwhile.
Peers from transformers run beside ours: assisted generation (`assistant_model`) against `sd`, and
`assistant_ensemble_weight` against `we_sd`, end to end against end to end (transformers times
prefill and decode together); `e2e_over_ours` = theirs / ours. Under greedy decoding every
accelerated method's text must equal its standard method's; exceptions are listed with the first
differing position and the gap there, log r(standard's token) - log r(our token) under the standard
method's r (a float near-tie is a gap near 0). Repeats are interleaved (every method once, then
again). Rows are appended to --out (jsonl) as they are produced.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter

from . import common

# transformers' method -> ours, compared end to end: at a fixed γ = 5, and with transformers' own draft
# schedule (up to 20 tokens, cut after a token the draft gave < 0.4: its num_assistant_tokens and
# assistant_confidence_threshold defaults; our draft_threshold)
PEER_OF = {"hf_assisted": ("sd", "sd_adaptive"), "hf_ensemble": ("we_sd", "we_sd_adaptive")}
PEERS = ("hf_assisted", "hf_ensemble")
BASELINE = {"we": "we", "we_sd": "we", "we_chef": "we", "cd": "cd", "cd_sd": "cd", "cd_chef": "cd",
            "large_model": "large_model", "sd": "large_model", "hf_assisted": "large_model", "hf_ensemble": "we"}
HF_SCHEDULE = dict(gamma=20, draft_threshold=0.4)
METHODS = {  # name -> plan kwargs
    "large_model": dict(method="large_model"),
    "sd": dict(method="sd", gamma=5),
    "sd_adaptive": dict(method="sd", **HF_SCHEDULE),
    "cd": dict(method="cd", alpha=0.1),
    "cd_sd": dict(method="cd_sd", alpha=0.1, gamma=5, proposer=1, bonus="none"),
    "cd_sd_exact": dict(method="cd_sd", alpha=0.1, gamma=5, proposer=1, bonus="exact"),
    "cd_chef": dict(method="cd_chef", alpha=0.1, gamma=[1, 5]),
    "we": dict(method="we", lam=0.5),
    "we_sd": dict(method="we_sd", lam=0.5, gamma=5, proposer=1, bonus="none"),
    "we_sd_exact": dict(method="we_sd", lam=0.5, gamma=5, proposer=1, bonus="exact"),
    "we_sd_adaptive": dict(method="we_sd", lam=0.5, proposer=1, bonus="none", **HF_SCHEDULE),
    "we_chef": dict(method="we_chef", lam=0.5, gamma=[1, 5]),
}
TREES = {name + "_tree": METHODS[name] for name in ("sd", "cd_chef", "we_chef")}  # the same, drafting --tree


def add_args(ap) -> None:
    common.pair_args(ap)
    ap.add_argument("--datasets", nargs="+", default=["humaneval"])
    common.data_args(ap)
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--fewshot", action="store_true", help="the paper's few-shot templates (GSM8K: ~500 prompt tokens)")
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--temperatures", nargs="+", type=float, default=[0.0])
    ap.add_argument("--methods", nargs="+", default=list(METHODS) + list(PEERS),
                    help=f"also {', '.join(TREES)}: the same methods drafting a tree (--tree)")
    ap.add_argument("--tree", default="15x3", help="the *_tree methods' tree, NxW: N nodes, at most W per level; "
                                                     "auto: a chain or a 7x2 tree each round, whichever measures faster")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--schedule", default="fixed", choices=["fixed", "adaptive"],
                    help="draft-length schedule of the methods that draft (fixed: the paper's γ every round)")
    ap.add_argument("--threads", default=None, help="auto | an int (default: torch's own, one per core)")
    ap.add_argument("--kernels", default="auto", choices=list(common.KERNELS), help="the row-invariant CPU kernels (auto = on wherever they run)")
    ap.add_argument("--out", default="results/bench_real.jsonl")


def hf_peer(target, draft, tok, prompt: str, max_new: int, temperature: float, weight: float | None, seed: int,
            stop: list[str]):
    """transformers' own assisted generation on the same prompt and stop strings (its default draft
    schedule); returns (tokens, seconds)."""
    import torch
    from transformers import StoppingCriteriaList, StopStringCriteria

    ids = tok(prompt, return_tensors="pt").input_ids
    torch.manual_seed(seed)
    kwargs = dict(do_sample=temperature > 0, max_new_tokens=max_new, assistant_model=draft,
                  eos_token_id=list(target.generation_config.eos_token_id or []), pad_token_id=tok.pad_token_id,
                  stopping_criteria=StoppingCriteriaList([StopStringCriteria(tok, list(stop))] if stop else []))
    # (stop_strings= would reach the assistant's own generate without a tokenizer and fail there)
    if temperature > 0:
        kwargs.update(temperature=temperature, top_k=0, top_p=1.0)
    if weight is not None:
        kwargs["assistant_ensemble_weight"] = weight
    start = time.perf_counter()
    out = target.generate(ids, **kwargs)
    return out[0, ids.shape[1]:].tolist(), time.perf_counter() - start


def run(args) -> None:
    from cos import Engine
    from cos.engine import plan_from_kwargs
    from cos.loading import load_member, load_tokenizer
    from cos.plan import default_schedule

    methods = {**METHODS, **{name: {**kw, "tree": args.tree} for name, kw in TREES.items()}}
    unknown = set(args.methods) - set(methods) - set(PEERS)
    if unknown:
        raise SystemExit(f"error: unknown methods {sorted(unknown)}; choose from {list(methods)} + hf_assisted, hf_ensemble")
    datasets = {name: common.load_examples(name, args.prompts, args.data_root, args.fewshot) for name in args.datasets}
    paths = [common.model_dir(args.model), common.model_dir(args.extra)]
    tok = load_tokenizer(paths[0])
    members = [load_member(p, "cpu", args.dtype, kernels=common.KERNELS[args.kernels]) for p in paths]
    threads = common.threads_option(args.threads)
    # --schedule for the methods that draft chains (tree: auto's chain rounds too); a tree of a fixed shape: fixed
    chains = lambda kw: kw["method"] not in ("large_model", "cd", "we") and default_schedule(kw.get("tree")) == "adaptive"
    engines = {name: Engine(members if kw["method"] != "large_model" else members[:1],
                            plan_from_kwargs(n_members=1 if kw["method"] == "large_model" else 2,
                                             **kw, **({"schedule": args.schedule} if chains(kw) else {})), tok, threads)
               for name, kw in methods.items() if name in args.methods}
    rows = []
    for ds_name, (ds, examples) in datasets.items():
        for temperature in args.temperatures:
            for name in args.methods:  # warm-up: one short generation per method, untimed
                run_one(name, engines, members, tok, examples[0].prompt, 8, temperature, 0, ds.stop_strings)
            outputs: dict[str, list] = {name: [] for name in args.methods}
            stats: dict[str, list] = {name: [] for name in args.methods}

            def measure(name, rep):
                """(decode tokens/s (ours; transformers: end to end), end-to-end tokens/s) of one pass."""
                tokens_total, seconds_total, e2e_total = 0, 0.0, 0.0
                for i, ex in enumerate(examples):
                    toks, secs, e2e, st = run_one(name, engines, members, tok, ex.prompt, args.max_new_tokens,
                                                  temperature, i, ds.stop_strings)
                    tokens_total, seconds_total, e2e_total = tokens_total + len(toks), seconds_total + secs, e2e_total + e2e
                    if rep == 0:
                        outputs[name].append(toks)
                        stats[name].append(st)
                print(f"[{ds_name} T={temperature} repeat {rep + 1}/{args.repeats}] {name}: "
                      f"{tokens_total / seconds_total:.2f} tok/s", flush=True)
                return tokens_total / seconds_total, tokens_total / e2e_total

            meter = common.load_meter()
            rates = common.interleaved(args.methods, args.repeats, measure)
            load = meter.stop().as_dict()
            results = {name: dict(tps=statistics.median(r for r, _ in rates[name]),
                                  e2e_tps=statistics.median(e for _, e in rates[name]),
                                  outputs=outputs[name], stats=stats[name]) for name in args.methods}
            prompt_ids = [tok(ex.prompt)["input_ids"] for ex in examples]
            for name, res in results.items():
                row = {**summarize(ds_name, temperature, name, res, results, engines, prompt_ids), "load": load}
                rows.append(row)
                common.append_row(args.out, row)
    print_table(rows)


def run_one(name, engines, members, tok, prompt, max_new, temperature, seed, stop):
    if name.startswith("hf_"):
        weight = 0.5 if name == "hf_ensemble" else None
        toks, secs = hf_peer(members[0].model, members[1].model, tok, prompt, max_new, temperature, weight, seed, stop)
        return toks, secs, secs, None
    start = time.perf_counter()
    out = engines[name].generate(prompt, max_new_tokens=max_new, temperature=temperature, seed=seed, stop=stop)
    return out.tokens, out.stats.wall_seconds, time.perf_counter() - start, out.stats


def summarize(ds: str, temperature: float, name: str, res: dict, results: dict, engines: dict,
              prompt_ids: list[list[int]]) -> dict:
    from cos.runner.compare import first_difference
    from cos.runner.greedy_gap import log_r_gap

    base = BASELINE[METHODS[name]["method"] if name in METHODS else TREES[name]["method"] if name in TREES else name]
    row = dict(dataset=ds, temperature=temperature, method=name, tokens_per_s=round(res["tps"], 3),
               e2e_tokens_per_s=round(res["e2e_tps"], 3))
    if base in results:  # decode speed for ours; transformers' peers: end to end against end to end
        key = "e2e_tps" if name.startswith("hf_") else "tps"
        row["speedup"] = round(res[key] / results[base][key], 3)
        if temperature == 0 and name != base:
            row["greedy_mismatches"] = []
            for k, (mine, theirs) in enumerate(zip(res["outputs"], results[base]["outputs"])):
                d = first_difference(mine, theirs)
                if d is None:
                    continue
                gap = None
                if d < min(len(mine), len(theirs)) and base in engines:
                    gap = round(log_r_gap(engines[base], prompt_ids[k], theirs, d, mine[d], theirs[d]), 5)
                row["greedy_mismatches"].append(dict(prompt=k, first_diff=d, log_r_gap=gap))
    ours = [peer for peer in PEER_OF.get(name, ()) if peer in results]
    if ours:
        row["e2e_over_ours"] = {peer: round(res["e2e_tps"] / results[peer]["e2e_tps"], 3) for peer in ours}
    stats = [s for s in res["stats"] if s is not None]
    if stats and stats[0].drafted is not None:
        row.update(acceptance(stats))
        if row.get("predicted") and row.get("speedup"):
            row["measured_over_predicted"] = round(row["speedup"] / row["predicted"], 3)
    return row


def acceptance(stats) -> dict:
    """α, median c and predicted speedup, and the mean acceptance length of a method's generations."""
    drafted, accepted = sum(s.drafted for s in stats), sum(s.accepted for s in stats)
    preds = [s.predicted_speedup for s in stats if s.predicted_speedup]
    costs = [s.cost_ratio for s in stats if s.cost_ratio]
    kinds = sum((Counter(s.round_kinds) for s in stats), Counter())  # tree: auto: chain | tree -> rounds
    return dict(alpha=round(accepted / drafted, 3) if drafted else None,
                c=round(statistics.median(costs), 3) if costs else None,
                predicted=round(statistics.median(preds), 3) if preds else None,
                mean_acceptance_length=round(1 + accepted / max(1, sum(s.rounds for s in stats)), 3),
                **({"round_kinds": dict(kinds)} if kinds else {}))


def print_table(rows: list[dict]) -> None:
    cols = ["dataset", "temperature", "method", "tokens_per_s", "e2e_tokens_per_s", "speedup", "alpha", "c",
            "predicted", "measured_over_predicted", "mean_acceptance_length", "round_kinds", "e2e_over_ours", "greedy_mismatches"]
    cells = []
    for r in rows:
        cells.append([str(r.get(c, "")) for c in cols])
        if isinstance(r.get("e2e_over_ours"), dict):
            cells[-1][cols.index("e2e_over_ours")] = ", ".join(f"{v} ({k})" for k, v in r["e2e_over_ours"].items())
    print(common.markdown_table(cols, cells))
