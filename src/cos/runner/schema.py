"""The keys a run configuration may hold (configs/default.yaml documents each), and the check that
names a misspelt or misplaced key with the one probably meant: method.gamm -> method.gamma,
temperature -> method.generate.temperature.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping

ANY = "any"  # a free mapping (adapter options, custom kwargs): its keys are not checked here
SCHEMA: dict = {
    "dataset": {"name": None, "size": None, "use_fewshot": None, "path": None, "chat_template": None, "options": ANY},
    "method": {
        "name": None, "model": None, "extra_model": None, "amateur_model": None, "draft_model": None,
        "lambda": None, "weights": None, "alpha": None, "plausibility": None, "combination": ANY,
        "gamma": None, "proposer": None, "bonus": None, "draft_threshold": None, "schedule": None, "tree": ANY,
        "byte_level": None, "prune": None, "draft_bytes": None,
        "generate": {"temperature": None, "top_p": None, "top_k": None, "max_tokens": None},
    },
    "max_prompt_len": None, "seed": None, "device": None, "dtype": None, "threads": None, "compile": None, "kernels": None, "save_path": None,
    "compare_with": None, "warmup": None, "progress": None, "backend": None, "vllm": ANY,
    "input": None, "stop": None,  # main_case.py only
}


def _paths(schema: dict = SCHEMA, prefix: str = "") -> list[str]:
    out = []
    for key, sub in schema.items():
        out.append(prefix + key)
        if isinstance(sub, dict):
            out += _paths(sub, prefix + key + ".")
    return out


def suggest(key: str) -> str:
    """' (did you mean method.gamma?)' for a misspelt or misplaced key, else ''."""
    parent, _, leaf = key.rpartition(".")
    paths = _paths()
    siblings = [p for p in paths if p.rpartition(".")[0] == parent]
    found = ([p for p in paths if p.rpartition(".")[2] == leaf]  # the right key in the wrong section
             or [p for p in siblings if p.rpartition(".")[2].startswith(leaf)]  # a prefix: temp -> temperature
             or [p for p in siblings if p.rpartition(".")[2] in
                 difflib.get_close_matches(leaf, [q.rpartition(".")[2] for q in siblings], n=1)]
             or difflib.get_close_matches(key, paths, n=1))
    return f" (did you mean {found[0]}?)" if found else ""


def check_keys(cfg: Mapping, schema: dict = SCHEMA, prefix: str = "") -> None:
    """Every key of `cfg` must be in `schema`: a typo like method.gamm fails naming the key."""
    for key, value in cfg.items():
        name = f"{prefix}{key}"
        if key not in schema:
            raise ValueError(f"unknown config key {name}{suggest(name)}; the keys are documented in "
                             f"configs/default.yaml")
        if isinstance(schema[key], dict) and value is not None:
            if not isinstance(value, Mapping):
                raise ValueError(f"{name} must be a mapping of {', '.join(schema[key])}, got {value!r}")
            check_keys(value, schema[key], name + ".")
