"""bench kernel: torch's bf16 F.linear vs cos.kernels' kernel (the AVX-512 or AVX2 build) on the Qwen2.5-1.5B shapes, then one Qwen forward.

    nice -n 10 python -m scripts.bench kernel                      # M = 1,2,3,4,6,8; 1 and 2 threads
    nice -n 10 python -m scripts.bench kernel --threads 2 --repeats 15 --shapes gate down

Per call: median milliseconds over --repeats (after one warm-up call) and the weight bytes read per
second (GB/s = N*K*2 / time: at few rows the cost is reading W); `best` is the fastest call of each
(torch / kernel), which shows what a busy shared machine hides in the median. `M/1` is the cost of M rows relative
to one row of the same implementation: what a verification block of M tokens costs over a single step.
Then, where the packaged qwen2.5-coder-0.5b-instruct is pulled (or --model), one forward of q new
tokens after a 200-token context (DynamicCache, logits_to_keep=q), stock vs with the row-invariant kernels installed (linear and attention),
and the largest logit difference between the two. Prints a table, then one JSON line. A benchmark,
not a test: the machine is shared, so figures move by some percent between runs.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

from . import common

SHAPES = {  # name: (N, K) of nn.Linear weight [out, in], Qwen2.5-1.5B
    "q": (1536, 1536), "kv": (256, 1536), "o": (1536, 1536), "gate": (8960, 1536),
    "down": (1536, 8960), "lm_head": (151936, 1536),
}


def timings_ms(fns, repeats: int) -> list[tuple[float, float]]:
    """(median, best) milliseconds of each function over `repeats` rounds after a warm-up call; the
    functions alternate within a round, so a burst of load on the shared machine hits all alike."""
    for fn in fns:
        fn()

    def seconds(i, rep):
        t = time.perf_counter()
        fns[i]()
        return time.perf_counter() - t

    times = common.interleaved(range(len(fns)), repeats, seconds)
    return [(statistics.median(times[i]) * 1e3, min(times[i]) * 1e3) for i in range(len(fns))]


def bench_shapes(names, ms, threads_list, repeats, ext) -> list[dict]:
    import torch
    import torch.nn.functional as F

    from cos.kernels import build

    rows = []
    native = build.native_bf16()  # the inner product the product uses on this CPU
    gen = torch.Generator().manual_seed(0)
    for name in names:
        n, k = SHAPES[name]
        w = (torch.randn(n, k, generator=gen) / k ** 0.5).bfloat16()
        xs = {m: torch.randn(m, k, generator=gen).bfloat16() for m in ms}
        for threads in threads_list:
            torch.set_num_threads(threads)
            base = {}
            for m in ms:
                x = xs[m]
                (t_torch, best_torch), (t_kern, best_kern) = timings_ms(
                    [lambda: F.linear(x, w), lambda: ext.bf16_linear(x, w, None, native)], repeats)
                base.setdefault("torch", t_torch)
                base.setdefault("kernel", t_kern)
                gb = n * k * 2 / 1e9
                rows.append(dict(shape=name, N=n, K=k, threads=threads, M=m, torch_ms=round(t_torch, 3),
                                 kernel_ms=round(t_kern, 3), torch_gbs=round(gb / t_torch * 1e3, 1),
                                 kernel_gbs=round(gb / t_kern * 1e3, 1),
                                 torch_rel1=round(t_torch / base["torch"], 2),
                                 kernel_rel1=round(t_kern / base["kernel"], 2),
                                 speedup=round(t_torch / t_kern, 2), torch_best_ms=round(best_torch, 3),
                                 kernel_best_ms=round(best_kern, 3)))
                r = rows[-1]
                print(f"{name:8s} {n:>6d}x{k:<5d} t={threads} M={m:<2d} | torch {r['torch_ms']:8.3f} ms "
                      f"{r['torch_gbs']:5.1f} GB/s M/1 {r['torch_rel1']:4.2f} | kernel {r['kernel_ms']:8.3f} ms "
                      f"{r['kernel_gbs']:5.1f} GB/s M/1 {r['kernel_rel1']:4.2f} | x{r['speedup']:.2f} | best "
                      f"{r['torch_best_ms']:.3f} / {r['kernel_best_ms']:.3f} ms", flush=True)
        del w, xs
    return rows


def bench_model(path: Path, threads_list, context: int, qs, repeats) -> list[dict]:
    import torch
    from transformers import AutoModelForCausalLM, DynamicCache

    from cos.kernels import install_row_kernels, uninstall_row_kernels

    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.bfloat16).eval()
    gen = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    prompt = torch.randint(0, vocab, (1, context), generator=gen)
    news = {q: torch.randint(0, vocab, (1, q), generator=gen) for q in qs}
    rows = []
    for threads in threads_list:
        torch.set_num_threads(threads)
        with torch.no_grad():
            cache = DynamicCache(config=model.config)
            model(prompt, past_key_values=cache, use_cache=True, logits_to_keep=1)
            for q in qs:
                ids = news[q]
                pos = torch.arange(context, context + q).unsqueeze(0)

                def step():
                    out = model(ids, past_key_values=cache, use_cache=True, position_ids=pos,
                                cache_position=pos[0], logits_to_keep=q)
                    cache.crop(-q)  # drop the q new tokens: back to the context
                    return out.logits

                def fast_step():
                    install_row_kernels(model)
                    try:
                        return step()
                    finally:
                        uninstall_row_kernels(model)

                stock_logits = step().float()
                changed = install_row_kernels(model)
                uninstall_row_kernels(model)
                fast_logits = fast_step().float()
                (t_stock, _), (t_fast, _) = timings_ms([step, fast_step], repeats)
                rows.append(dict(threads=threads, context=context, q=q, linears=changed,
                                 stock_ms=round(t_stock, 2), kernel_ms=round(t_fast, 2),
                                 speedup=round(t_stock / t_fast, 2),
                                 max_logit_diff=round(float((fast_logits - stock_logits).abs().max()), 4),
                                 argmax_equal=bool(torch.equal(fast_logits.argmax(-1), stock_logits.argmax(-1)))))
                r = rows[-1]
                print(f"forward t={threads} ctx={context} q={q}: stock {r['stock_ms']:.1f} ms, kernel "
                      f"{r['kernel_ms']:.1f} ms (x{r['speedup']:.2f}), max |dlogit| {r['max_logit_diff']}, "
                      f"argmax equal {r['argmax_equal']}", flush=True)
    return rows


def add_args(ap) -> None:
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--m", nargs="+", type=int, default=[1, 2, 3, 4, 6, 8])
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--model", type=Path, default=None,
                    help="a model folder (default: the packaged qwen2.5-coder-0.5b-instruct where it is pulled)")
    ap.add_argument("--context", type=int, default=200)
    ap.add_argument("--q", nargs="+", type=int, default=[1, 6])
    ap.add_argument("--no-model", action="store_true", help="skip the end-to-end forward")


def run(args) -> None:
    import torch

    from cos.kernels import build
    from cos.models.packaged import packaged_model_dir

    if args.model is None:
        args.model = packaged_model_dir(common.PAIR[1]) or Path(common.PAIR[1])

    ext = build.load()
    if ext is None:
        raise SystemExit(f"error: the kernel is unavailable here: {build.failure()}")
    threads_before = torch.get_num_threads()
    result = dict(cpu=build.cpu_supported()[0], torch=torch.__version__,
                  linear=bench_shapes(args.shapes, args.m, args.threads, args.repeats, ext))
    if not args.no_model and args.model.is_dir():
        result["forward"] = bench_model(args.model, args.threads, args.context, args.q, max(3, args.repeats // 2))
    elif not args.no_model:
        print(f"(no model at {args.model}: end-to-end check skipped)")
    torch.set_num_threads(threads_before)
    print(json.dumps(result))

