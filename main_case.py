"""Generate from one prompt and print the text and the statistics (configs/default_case.yaml).

    python main_case.py input='def fib(n):' method=cd_chef method.model=<expert> method.amateur_model=<amateur> \
        method.generate.temperature=0 method.generate.max_tokens=64 [compare_with=cd]
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
if importlib.util.find_spec("cos") is None:  # a checkout without `pip install -e .`
    sys.path.insert(0, str(ROOT / "src"))

import hydra

from cos.runner.cli import case_main, exit_on_bad_argv, load_env


@hydra.main(version_base="1.3", config_path=str(ROOT / "configs"), config_name="default_case")
def main(cfg) -> None:
    code = case_main(cfg)
    if code:
        sys.exit(code)


if __name__ == "__main__":
    load_env(ROOT)
    exit_on_bad_argv(sys.argv[1:], ROOT / "configs")
    main()
