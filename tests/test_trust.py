"""Bad input fails early and clearly (issue 10): a combination's output, data files, settings a method
ignores, API arguments, member compatibility, resume. Each case names its cause before generation
(and, where the inputs allow, before any model loads)."""

from __future__ import annotations

import pytest
import torch

from conftest import members
from cos import Custom, Engine, SamplingParams, make_plan

V = 1024


def ten_columns(values: list[torch.Tensor]) -> torch.Tensor:
    return values[0][..., :10]


def scalar(values: list[torch.Tensor]) -> float:
    return 1.0


def negative(values: list[torch.Tensor]) -> torch.Tensor:
    return values[0] - values[1]  # probabilities minus probabilities: negative entries


def nan_logits(values: list[torch.Tensor]) -> torch.Tensor:
    return values[0] * float("nan")


def fine(values: list[torch.Tensor]) -> torch.Tensor:
    return values[0] + values[1]


# ----------------------------------------------------------------- combination output
@pytest.mark.parametrize("space", ["probs", "logits", "raw-logits"])
def test_combination_returning_10_of_1024_columns_is_refused(space: str) -> None:
    comb = Custom(n_members=2, fn=ten_columns, declared_space=space)
    with pytest.raises(ValueError, match=r"custom combination test_trust:ten_columns .*returned shape \[2, 10\]; "
                                         r"it must return .* shape \[2, 1024\]"):
        comb.probe(V)


def test_combination_returning_a_scalar_is_refused() -> None:
    comb = Custom(n_members=2, fn=scalar, declared_space="probs")
    with pytest.raises(TypeError, match="test_trust:scalar .*returned float, not a tensor"):
        comb.probe(V)


@pytest.mark.parametrize("fn, problem", [(negative, "negative probabilities"), (nan_logits, "NaN values")])
def test_combination_returning_no_distribution_is_refused(fn, problem: str) -> None:
    space = "probs" if fn is negative else "logits"
    with pytest.raises(ValueError, match=f"{fn.__name__} .*returned {problem}"):
        Custom(n_members=2, fn=fn, declared_space=space).probe(V)


def test_combination_values_checked_once_shape_always() -> None:
    comb = Custom(n_members=2, fn=fine, declared_space="logits")
    logits = [torch.randn(3, V), torch.randn(3, V)]
    r = comb.distribution(logits, SamplingParams())
    assert r.shape == (3, V) and comb._values_checked
    comb.fn = ten_columns  # a later call with a wrong shape is still caught (no sync needed for that)
    with pytest.raises(ValueError, match="returned shape"):
        comb.distribution(logits, SamplingParams())


def test_engine_refuses_a_bad_combination_before_generating(models) -> None:
    plan = make_plan("custom_chef", 2, Custom(n_members=2, fn=ten_columns, declared_space="probs"), [1, 3])
    with pytest.raises(ValueError, match="ten_columns .*returned shape"):
        Engine(members(models["base"], models["close"]), plan)
    Engine(members(models["base"], models["close"]), make_plan("custom", 2, Custom(n_members=2, fn=fine)))
