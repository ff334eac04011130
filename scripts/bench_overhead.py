"""What the engine costs beyond the members' forward passes, per round (a benchmark, not a test).

    python scripts/bench_overhead.py                       # tiny random members
    python scripts/bench_overhead.py --models DIR_A DIR_B  # real members (e.g. packaged Qwen pair)

Overhead = wall time - time inside member forwards, reported per round and as a share of wall time.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from cos import Engine  # noqa: E402
from cos.engine import plan_from_kwargs  # noqa: E402
from cos.loading import load_member  # noqa: E402
from cos.member import Member  # noqa: E402


def members_from(args) -> list[Member]:
    if args.models:
        return [load_member(p, "cpu", args.dtype) for p in args.models]
    from conftest import members, tiny_model  # tests/conftest.py: tiny random Llamas

    return members(tiny_model(1), tiny_model(2))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs=2, help="two member folders, config order [model, extra]")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    ms = members_from(args)
    prompt = list(range(10, 60))
    for method, gamma, proposer in [("we", 1, None), ("we_sd", 5, 1), ("we_chef", [1, 5], None), ("cd_chef", [1, 5], None)]:
        engine = Engine(ms, plan_from_kwargs(method, 2, gamma=gamma, proposer=proposer))  # the family's preset r
        engine.generate(prompt, max_new_tokens=4, temperature=0, eos_token_ids=[])  # warm-up
        rows = []
        for _ in range(args.repeats):
            s = engine.generate(prompt, max_new_tokens=args.tokens, temperature=1.0, seed=0, eos_token_ids=[]).stats
            inside = sum(m.seconds for m in s.members)
            rounds = s.rounds or s.new_tokens
            rows.append(((s.wall_seconds - inside) / rounds * 1000, (s.wall_seconds - inside) / s.wall_seconds))
        rows.sort()
        per_round, share = rows[len(rows) // 2]
        print(json.dumps({"method": method, "gamma": gamma, "overhead_ms_per_round": round(per_round, 3),
                          "overhead_share": round(share, 4), "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
