"""bench dtype: fp32 vs bf16 on this CPU for the packaged Qwen pair: speed side by side, and how far bf16 moves r.

    python -m scripts.bench dtype                       # HumanEval prompts, 48 new tokens, 3 repeats
    python -m scripts.bench dtype --prompts 3 --max-new-tokens 64 --repeats 3

One process loads both models in both dtypes. For each of `large_model` (1.5B alone), `cd` and
`cd_chef` (1.5B expert, 0.5B amateur, α = 0.1), greedy, the same prompts run in fp32 and in bf16
alternately per repeat; a row reports tokens/s (median over repeats), the bf16 / fp32 ratio, and
how many greedy tokens bf16 keeps before it first departs from fp32. Exactness of CoS holds in any
dtype (it reproduces the standard method run in the same dtype); what bf16 changes is the reference
itself, which `agree` and the logit gap on the prompt measure. A benchmark, not a test.
"""

from __future__ import annotations

import statistics

from . import common

METHODS = {"large_model": dict(method="large_model"), "cd": dict(method="cd", alpha=0.1),
           "cd_chef": dict(method="cd_chef", alpha=0.1, gamma=[1, 5])}
DTYPES = ("float32", "bfloat16")


def add_args(ap) -> None:
    common.pair_args(ap, extra="--amateur")
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=3)
    common.data_args(ap)


def engines_for(paths: list[str], tok, dtype: str) -> dict:
    from cos import Engine
    from cos.engine import plan_from_kwargs
    from cos.loading import load_member

    members = [load_member(p, "cpu", dtype) for p in paths]
    return {name: Engine(members[:1] if kw["method"] == "large_model" else members,
                         plan_from_kwargs(n_members=1 if kw["method"] == "large_model" else 2, **kw), tok)
            for name, kw in METHODS.items()}


def prompt_logit_gap(a, b, ids: list[int]) -> float:
    """max |logit_fp32 - logit_bf16| of the 1.5B over the prompt's last position."""
    import torch

    x = torch.tensor([ids])
    with torch.no_grad():
        la = a.members[0].model(x).logits[0, -1].float()
        lb = b.members[0].model(x).logits[0, -1].float()
    return float((la - lb).abs().max())


def run(args) -> None:
    from cos.loading import load_tokenizer
    from cos.runner.compare import first_difference

    _, examples = common.load_examples("humaneval", args.prompts, args.data_root)
    paths = [common.model_dir(args.model), common.model_dir(args.amateur)]
    tok = load_tokenizer(paths[0])
    by_dtype = {d: engines_for(paths, tok, d) for d in DTYPES}
    prompts = [tok(ex.prompt)["input_ids"] for ex in examples]
    gap = max(prompt_logit_gap(by_dtype["float32"]["large_model"], by_dtype["bfloat16"]["large_model"], ids)
              for ids in prompts)
    print(f"max |logit fp32 - bf16| of the 1.5B at the prompts' last position: {gap:.3f}")

    print(common.markdown_table(["method", "fp32 tok/s", "bf16 tok/s", "bf16 / fp32",
                                 "greedy tokens equal before first difference"], []))
    for name in METHODS:
        for engines in by_dtype.values():  # warm-up, untimed
            engines[name].generate(prompts[0], max_new_tokens=8, temperature=0)

        def measure(dtype, rep):  # dtypes alternate within a repeat, so drift hits both alike
            outs = [by_dtype[dtype][name].generate(ids, max_new_tokens=args.max_new_tokens, temperature=0)
                    for ids in prompts]
            return sum(len(o.tokens) for o in outs) / sum(o.stats.wall_seconds for o in outs), [o.tokens for o in outs]

        passes = common.interleaved(DTYPES, args.repeats, measure)
        fp32, bf16 = (statistics.median(rate for rate, _ in passes[d]) for d in DTYPES)
        agree = [first_difference(a, b) for a, b in zip(passes["float32"][-1][1], passes["bfloat16"][-1][1])]
        agree_text = ", ".join("all" if d is None else str(d) for d in agree)
        print(f"| {name} | {fp32:.2f} | {bf16:.2f} | {bf16 / fp32:.2f} | {agree_text} (of {args.max_new_tokens}) |",
              flush=True)
