"""GSM8K for lm-eval from local jsonl files, no hub: gsm8k_local.yaml's `custom_dataset`.

The folder holds train.jsonl (few-shot examples) and test.jsonl, rows {"question", "answer": "... #### N"}
(the hub's openai/gsm8k `main`). It is named explicitly, never guessed: `--metadata gsm8k_dir=<folder>`,
else the environment variable COS_GSM8K_DIR. With the hub reachable, lm-eval's own `gsm8k` task needs neither.
"""

from __future__ import annotations

import os
from pathlib import Path

SPLITS = ("train", "test")
ENV = "COS_GSM8K_DIR"


def load(gsm8k_dir: str | None = None, **_metadata):
    """A DatasetDict {train, test}. lm-eval passes the task's metadata (and model_args) as keywords."""
    import datasets

    gsm8k_dir = gsm8k_dir or os.environ.get(ENV)
    if not gsm8k_dir:
        raise ValueError(f"gsm8k_local needs its data folder (train.jsonl and test.jsonl, GSM8K main): pass "
                         f"--metadata gsm8k_dir=<folder> or set {ENV}=<folder>; with the hub reachable, lm-eval's "
                         f"own task gsm8k needs neither")
    folder = Path(gsm8k_dir).expanduser()
    files = {split: folder / f"{split}.jsonl" for split in SPLITS}
    missing = [str(f) for f in files.values() if not f.is_file()]
    if missing:
        raise FileNotFoundError(f"gsm8k_local: {missing[0]} not found; give the folder holding train.jsonl and "
                                f"test.jsonl (GSM8K main: question, answer ending '#### N') with --metadata "
                                f"gsm8k_dir=<folder>")
    return datasets.load_dataset("json", data_files={split: str(f) for split, f in files.items()})
