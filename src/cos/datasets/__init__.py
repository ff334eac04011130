"""Benchmark adapters: `get_dataset(name, **options)` -> a DatasetAdapter (see base.py).

The prompt templates (prompts/*.txt) and MMLU's chain-of-thought prefixes (mmlu_cot_prompts.json) ship
as package data; their sources are in prompts/README.md.

    ds = get_dataset("gsm8k", use_fewshot=True)
    examples = ds.load(size="tiny", seed=0)             # from the hub (openai/gsm8k), cached by `datasets`
    examples = ds.load(path="data/gsm8k", size="tiny")  # or local: a jsonl file or a folder holding test.jsonl
    # generate each example.prompt with ds.stop_strings / ds.max_new_tokens, then
    metrics = ds.aggregate([ds.score(ex, text) for ex, text in zip(examples, outputs)])
"""

from __future__ import annotations

from cos.datasets.base import DatasetAdapter, Example
from cos.datasets.cnndm import CNNDM
from cos.datasets.gsm8k import GSM8K
from cos.datasets.humaneval import HumanEval
from cos.datasets.jsonl import JsonlDataset
from cos.datasets.mmlu import MMLU

REGISTRY: dict[str, type[DatasetAdapter]] = {
    cls.name: cls for cls in (GSM8K, MMLU, HumanEval, CNNDM, JsonlDataset)
}


def get_dataset(name: str, **options) -> DatasetAdapter:
    """The adapter called `name`, built with `options` (e.g. use_fewshot, prompts_dir)."""
    if name not in REGISTRY:
        raise ValueError(f"unknown dataset {name!r}; known: {', '.join(sorted(REGISTRY))}")
    return REGISTRY[name](**options)


__all__ = ["REGISTRY", "DatasetAdapter", "Example", "get_dataset"]
