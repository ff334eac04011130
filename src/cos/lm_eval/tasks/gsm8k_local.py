"""GSM8K for lm-eval from local jsonl files, no hub: gsm8k_local.yaml's `custom_dataset`.

The folder holds train.jsonl (few-shot examples) and test.jsonl, rows {"question", "answer": "... #### N"}
(the hub's openai/gsm8k `main`): by default ../shared/data/gsm8k beside the checkout, where the project's
own GSM8K adapter reads it (cos.datasets); elsewhere with `--metadata gsm8k_dir=<folder>`.
"""

from __future__ import annotations

from pathlib import Path

from cos.datasets.base import DEFAULT_DATA_ROOT

SPLITS = ("train", "test")


def load(gsm8k_dir: str | None = None, **_metadata):
    """A DatasetDict {train, test}. lm-eval passes the task's metadata (and model_args) as keywords."""
    import datasets

    folder = Path(gsm8k_dir).expanduser() if gsm8k_dir else DEFAULT_DATA_ROOT / "gsm8k"
    files = {split: folder / f"{split}.jsonl" for split in SPLITS}
    missing = [str(f) for f in files.values() if not f.is_file()]
    if missing:
        raise FileNotFoundError(f"gsm8k_local: {missing[0]} not found; give the folder holding train.jsonl and "
                                f"test.jsonl (GSM8K main: question, answer ending '#### N') with --metadata "
                                f"gsm8k_dir=<folder>")
    return datasets.load_dataset("json", data_files={split: str(f) for split, f in files.items()})
