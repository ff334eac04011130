"""`python -m cos.lm_eval ARGS` is `lm_eval ARGS` with the model `cos` registered first.

    python -m cos.lm_eval --model cos --model_args members=EXPERT|AMATEUR,method=cd_chef --tasks gsm8k

lm-eval 0.4.13 finds a model only in its own list or among modules already imported (no entry points),
so its `lm_eval` command cannot load `cos`; this one imports it, then hands over to lm-eval's CLI. The
engine's log lines (logger `cos`: statistics, warnings) go where lm-eval's go, at its level.
"""

import logging

import cos.lm_eval  # noqa: F401 (registers --model cos)
from lm_eval.__main__ import cli_evaluate
from lm_eval.utils import setup_logging


def main() -> None:
    setup_logging()  # lm-eval's handler and level (LMEVAL_LOG_LEVEL), shared with the `cos` logger
    harness, ours = logging.getLogger("lm_eval"), logging.getLogger("cos")
    for handler in harness.handlers:
        ours.addHandler(handler)
    ours.setLevel(harness.level)
    ours.propagate = False
    cli_evaluate()


if __name__ == "__main__":
    main()
