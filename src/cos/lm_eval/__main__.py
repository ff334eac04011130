"""`python -m cos.lm_eval ARGS` is `lm_eval ARGS` with the model `cos` registered first.

    python -m cos.lm_eval --model cos --model_args members=EXPERT|AMATEUR,method=cd_chef --tasks gsm8k
"""

import cos.lm_eval  # noqa: F401 (registers --model cos)
from lm_eval.__main__ import cli_evaluate

if __name__ == "__main__":
    cli_evaluate()
