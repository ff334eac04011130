"""Benchmark a decoding method on a dataset; configs/ composed by Hydra (see configs/README.md).

    python main_dataset.py dataset.name=humaneval dataset.size=tiny method=cd_chef \
        method.model=<expert> method.amateur_model=<amateur> method.gamma=[1,5] method.generate.temperature=0
    python main_dataset.py ... save_path=outputs/run1        # write there; rerun the same line to resume
    python main_dataset.py ... compare_with=cd               # + the standard method, same prompts, same process
    python main_dataset.py -m method=cd,cd_chef save_path=multirun/sweep1   # a sweep; python scripts/reproduce.py collect
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
if importlib.util.find_spec("cos") is None:  # a checkout without `pip install -e .`
    sys.path.insert(0, str(ROOT / "src"))

import hydra

from cos.runner.cli import dataset_main, exit_on_bad_argv, load_env


@hydra.main(version_base="1.3", config_path=str(ROOT / "configs"), config_name="default")
def main(cfg) -> None:
    code = dataset_main(cfg)
    if code:
        sys.exit(code)


if __name__ == "__main__":
    load_env(ROOT)
    exit_on_bad_argv(sys.argv[1:], ROOT / "configs")
    main()
