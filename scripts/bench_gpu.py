"""Member runtime on a GPU: eager vs captured forwards, c, and what they mean for CoS (one script, < 8 min).

    python scripts/bench_gpu.py                      # on a CUDA machine (bf16); writes $OUT/bench_gpu.json if set
    python scripts/bench_gpu.py --device cpu --tiny  # a smoke test of the script itself on CPU (minutes)

Weights cannot travel to the GPU machine, and speed does not depend on their values: members are
random-weight models built from the real configs below (Qwen2.5 0.5B / 1.5B, Llama-3.2-1B / 3.1-8B).
Acceptance comes from the real pair on CPU (--alpha, measured there by scripts/bench/real.py).
It measures:
  1. seconds per forward at query lengths 1..8 (context 256): eager (preallocated cache) and captured
     (static cache + torch.compile mode="reduce-overhead", i.e. CUDA graphs); compile time apart;
  2. c = small step / large step, eager and captured, beside the weight-bytes ratio;
  3. tokens/s of large_model, cd, we at batch 1 (eager and captured, greedy, 64 tokens);
  5. (below 4 in the output) seconds of one draft-tree verify (root + 15, 31, 63 nodes, eager) beside the
     one-token step of 1.: what a tree costs there (docs/algorithm.md §4.6);
  4. seconds per round of cd_sd (γ 5), cd_chef and we_chef ([1, 5]) in forced regimes: r = the
     proposer's own distribution (realignment λ = 1: everything accepted) and r = the large member's
     (λ = 0: random members, nothing accepted); the round costs the same either way, so the speedup
     at the CPU's α follows: tokens per round (§6) / seconds per round, over the standard method.
Targets: captured 1.5B single-token step <= 1/3 of eager; c within 1.5x of the bytes ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

from cos import Engine, make_combination, make_plan
from cos.member import Member
from cos.plan import REGISTRY
from cos.schedule import expected_tokens
from cos.tree import ROOT, DraftTree

CONFIGS = {  # the real architectures (hidden, intermediate, layers, heads, kv heads, vocab, tied head)
    "qwen2.5-0.5b": (Qwen2Config, dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                                num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True,
                                max_position_embeddings=32768, rope_theta=1e6)),
    "qwen2.5-1.5b": (Qwen2Config, dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                                num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True,
                                max_position_embeddings=32768, rope_theta=1e6)),
    "llama-3.2-1b": (LlamaConfig, dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                                num_key_value_heads=8, vocab_size=128256, tie_word_embeddings=True,
                                max_position_embeddings=131072, rope_theta=5e5, head_dim=64)),
    "llama-3.1-8b": (LlamaConfig, dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                                num_key_value_heads=8, vocab_size=128256, tie_word_embeddings=False,
                                max_position_embeddings=131072, rope_theta=5e5, head_dim=128)),
}
TINY = {name: dict(hidden_size=64 * (1 + i % 2), intermediate_size=128, num_hidden_layers=2 + i % 2,
                   num_attention_heads=4, num_key_value_heads=2, vocab_size=1024, head_dim=16 * (1 + i % 2))
        for i, name in enumerate(CONFIGS)}
PAIRS = [("qwen2.5-1.5b", "qwen2.5-0.5b"), ("llama-3.1-8b", "llama-3.2-1b")]  # [large, small]
CONTEXT, CAPACITY = 256, 1024
PRESET_KWARGS = {"cd": {"alpha": 0.1}, "we": {"lam": 0.5}}  # the combination of each family's methods


def build(name: str, device: str, dtype: torch.dtype, tiny: bool):
    cls, kwargs = CONFIGS[name]
    config = cls(**{**kwargs, **(TINY[name] if tiny else {})})
    torch.manual_seed(hash(name) % 1000)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.eval()


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def seconds_per_call(member: Member, q: int, device: str, repeats: int) -> float:
    """Median seconds of one forward of q tokens after CONTEXT cached tokens (rolled back each time)."""
    seq = torch.randint(0, 1000, (CONTEXT + q,), device=device)
    member.prefill(seq[:CONTEXT])
    times = []
    for _ in range(repeats + 2):
        sync(device)
        t = time.perf_counter()
        member.score(seq[: CONTEXT - 1 + q + 1], q)
        sync(device)
        times.append(time.perf_counter() - t)
    return statistics.median(times[2:])


def tree_seconds(member: Member, nodes: int, device: str, repeats: int) -> float:
    """Median seconds of one tree verify (Member.score_tree: the root token + `nodes` nodes, 4 per level)
    after CONTEXT cached tokens: what a draft tree's verify pass costs beside a one-token step."""
    seq = torch.randint(0, 1000, (CONTEXT,), device=device)
    tree = DraftTree()
    for i in range(nodes):
        tree.add(i + 7, ROOT if i < 4 else i - 4)
    member.prefill(seq)
    times = []
    for _ in range(repeats + 2):
        sync(device)
        t = time.perf_counter()
        member.score_tree(seq, tree, root=True)
        sync(device)
        times.append(time.perf_counter() - t)
    return statistics.median(times[2:])


def tokens_per_second(members, method: str, device: str, n_tokens: int, **plan_kwargs) -> tuple[float, object]:
    family = REGISTRY[method].family
    n = 1 if family.one_model else 2
    combination = None if family.one_model else plan_kwargs.pop("combination", None) or \
        make_combination(family.preset, 2, **PRESET_KWARGS[family.preset])
    engine = Engine(members[:n], make_plan(method, n, combination, **plan_kwargs))
    prompt = torch.randint(0, 1000, (64,)).tolist()
    engine.generate(prompt, max_new_tokens=8, temperature=0, eos_token_ids=[])  # warm-up
    sync(device)
    out = engine.generate(prompt, max_new_tokens=n_tokens, temperature=0, eos_token_ids=[])
    return out.stats.tokens_per_second, out.stats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="tiny configs (a CPU smoke test of this script)")
    ap.add_argument("--alpha", type=float, nargs=3, default=[0.72, 0.72, 0.92], metavar=("CD_SD", "CD_CHEF", "WE_CHEF"),
                    help="acceptance measured with the real Qwen pair on CPU (bench_real, HumanEval/GSM8K T=0)")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--budget", type=float, default=420.0, help="seconds; later captures are skipped past it")
    args = ap.parse_args()
    start = time.time()
    device, dtype = args.device, torch.bfloat16
    report: dict = {"device": torch.cuda.get_device_name() if device.startswith("cuda") else "cpu",
                    "torch": torch.__version__, "tiny": args.tiny, "latency": {}, "compile_seconds": {}, "c": {},
                    "tokens_per_second": {}, "rounds": {}, "tree_verify": {}}
    lengths = list(range(1, 9))
    for large, small in PAIRS:
        models = {name: build(name, device, dtype, args.tiny) for name in (large, small)}
        nbytes = {k: sum(p.numel() * p.element_size() for p in m.parameters()) for k, m in models.items()}
        runtimes = {"eager": lambda m, n: Member(m, name=n, capacity=CAPACITY)}
        if time.time() - start < args.budget:
            runtimes["captured"] = lambda m, n: Member(m, name=n, cache="static", capacity=CAPACITY, compile=True)
        members = {}
        for runtime, make in runtimes.items():
            members[runtime] = {name: make(models[name], name) for name in (large, small)}
            for name, member in members[runtime].items():
                qs = lengths if large.startswith("qwen") else [1, 6]
                if runtime == "captured":
                    report["compile_seconds"][name] = member.warm_up(qs)
                report["latency"][f"{runtime}/{name}"] = {q: seconds_per_call(member, q, device, args.repeats) for q in qs}
                print(f"{runtime:8s} {name:14s} " + " ".join(
                    f"q{q}={1000 * t:.2f}ms" for q, t in report["latency"][f"{runtime}/{name}"].items()), flush=True)
            if runtime == "eager":  # 5. draft-tree verify passes (eager: a tree's mask changes every round)
                for name, member in members[runtime].items():
                    report["tree_verify"][name] = {n: tree_seconds(member, n, device, args.repeats) for n in (15, 31, 63)}
                    print(f"tree     {name:14s} " + " ".join(f"nodes{n}={1000 * t:.2f}ms" for n, t in
                                                         report["tree_verify"][name].items()), flush=True)
            lat = report["latency"]
            report["c"][f"{runtime}/{small}/{large}"] = {
                "c": lat[f"{runtime}/{small}"][1] / lat[f"{runtime}/{large}"][1], "bytes_ratio": nbytes[small] / nbytes[large]}
        if not large.startswith("qwen"):
            continue
        # 3. standard methods at batch 1, and 4. rounds in forced regimes (Qwen pair: eager and captured)
        for runtime, pair in members.items():
            ms = [pair[large], pair[small]]
            for method in ("large_model", "cd", "we"):
                report["tokens_per_second"][f"{runtime}/{method}"] = tokens_per_second(ms, method, device, args.tokens)[0]
            for (method, gamma, alpha) in zip(("cd_sd", "cd_chef", "we_chef"), (5, [1, 5], [1, 5]), args.alpha):
                naive, standard_method = REGISTRY[method].loop == "naive", REGISTRY[method].family.standard
                rows = {}
                for regime, lam in (("all_accepted", 1.0), ("none_accepted", 0.0)):
                    combination = make_combination("realignment", 2, lam=lam)
                    kw = dict(gamma=gamma, proposer=1 if naive else None, combination=combination)
                    _, st = tokens_per_second(ms, method, device, args.tokens, **kw)
                    rows[regime] = {"seconds_per_round": st.wall_seconds / max(1, st.rounds),
                                    "tokens_per_round": st.new_tokens / max(1, st.rounds), "alpha": st.acceptance_rate}
                per_round = statistics.mean(r["seconds_per_round"] for r in rows.values())
                bonus = 0 if naive else 1
                standard = report["tokens_per_second"][f"{runtime}/{standard_method}"]
                predicted = expected_tokens(alpha, 5, bonus) / per_round / standard
                report["rounds"][f"{runtime}/{method}"] = {**rows, "alpha_cpu": alpha,
                                                           "predicted_speedup_at_alpha": predicted}
                print(f"{runtime:8s} {method:8s} round {1000 * per_round:.1f} ms; predicted speedup at α={alpha}: "
                      f"{predicted:.2f}x over {standard_method} ({standard:.1f} tok/s)", flush=True)
    print_summary(report)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "bench_gpu.json"), "w") as f:
            json.dump(report, f, indent=1, default=str)
    print(json.dumps({"elapsed_s": round(time.time() - start, 1), "c": report["c"]}, default=str))


def print_summary(report: dict) -> None:
    lat = report["latency"]
    print("\n| member | eager q=1 (ms) | captured q=1 (ms) | captured / eager | eager q=6 / q=1 |")
    print("|---|---|---|---|---|")
    for key in [k for k in lat if k.startswith("eager/")]:
        name = key.split("/", 1)[1]
        eager, cap = lat[key], lat.get(f"captured/{name}")
        print(f"| {name} | {1000 * eager[1]:.2f} | {'-' if cap is None else f'{1000 * cap[1]:.2f}'} | "
              f"{'-' if cap is None else f'{cap[1] / eager[1]:.2f}'} | {eager[6] / eager[1]:.2f} |")
    print("\n| runtime / pair | c | bytes ratio | c / bytes |")
    print("|---|---|---|---|")
    for key, v in report["c"].items():
        print(f"| {key} | {v['c']:.3f} | {v['bytes_ratio']:.3f} | {v['c'] / v['bytes_ratio']:.2f} |")
    for key, v in report["tokens_per_second"].items():
        print(f"{key}: {v:.1f} tok/s")


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    main()
