"""The evaluation data (GSM8K, MMLU, HumanEval jsonl) for tests: read only through COS_EVAL_DATA.

COS_EVAL_DATA names a folder holding gsm8k/, mmlu/ and humaneval/ (each with test.jsonl); .ci/run sets it
where CI has one. Nothing is guessed: a test that needs the data skips, naming the variable, where it is
unset or the folder lacks what the test reads.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ENV = "COS_EVAL_DATA"


def eval_data() -> Path | None:
    """The folder COS_EVAL_DATA names, or None when it is unset."""
    value = os.environ.get(ENV)
    return Path(value).expanduser() if value else None


def data_path(*parts: str) -> Path:
    """<COS_EVAL_DATA>/<parts...> (a path that does not exist when the variable is unset)."""
    root = eval_data()
    return (root if root is not None else Path("/nonexistent-" + ENV)).joinpath(*parts)


def missing(*parts: str) -> str | None:
    """Why <COS_EVAL_DATA>/<parts> cannot be read (None when it can)."""
    root = eval_data()
    if root is None:
        return f"evaluation data not given: set {ENV} to a folder holding gsm8k/, mmlu/, humaneval/"
    if not root.joinpath(*parts).exists():
        return f"{ENV}={root} has no {'/'.join(parts) or 'folder'}"
    return None


def needs_eval_data(*parts: str) -> pytest.MarkDecorator:
    """Skip unless <COS_EVAL_DATA>/<parts> exists; the reason names the variable."""
    why = missing(*parts)
    return pytest.mark.skipif(why is not None, reason=why or "")
