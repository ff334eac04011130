"""The benchmark runner behind main_dataset.py and main_case.py (configs/ composed by Hydra there).

schema.py   the keys a config may hold; a misspelt key is named with the one meant
config.py   composed config -> checked plain arguments (RunConfig, MethodSpec)
resolve.py  model names -> folders ($MODEL_PATH/<name>, absolute paths, packaged models, hub ids)
build.py    RunConfig -> plans -> paths -> members -> Engine(s)
run.py      the dataset loop: resume, warm-up, progress, one flushed jsonl line per prompt
case.py     one prompt from the command line
compare.py  compare_with: speedup measured in the same run, greedy identity check
summary.py  per-prompt records -> summary.json
results.py  the output folder: config.yaml, results.jsonl, summary.json, resume
cli.py      .env, command-line pre-checks, one-line errors
custom_examples.py  combinations named from YAML (configs/method/custom.yaml): realignment, proxy-tuning
"""

from .build import Built, build_engine, build_engines
from .config import MethodSpec, RunConfig, run_config
from .resolve import resolve_model

__all__ = ["Built", "MethodSpec", "RunConfig", "build_engine", "build_engines", "resolve_model", "run_config"]
