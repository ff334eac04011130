"""lm-evaluation-harness integration: the model `cos` (model.py), registered in lm-eval's model registry
when this package is imported. `python -m cos.lm_eval ...` is lm-eval's command line with it registered.

Needs lm-eval (requirements.txt pins 0.4.13): pip install lm-eval==0.4.13
"""

try:
    from .model import CoSLM
except ModuleNotFoundError as e:  # lm-eval itself missing: say how to get it
    if e.name and e.name.split(".")[0] == "lm_eval":
        raise ModuleNotFoundError("cos.lm_eval needs lm-evaluation-harness: pip install lm-eval==0.4.13",
                                  name=e.name) from e
    raise

__all__ = ["CoSLM"]
