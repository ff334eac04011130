"""Bad input fails early and clearly (issue 10): a combination's output, data files, settings a method
ignores, API arguments, member compatibility, resume. Each case names its cause before generation
(and, where the inputs allow, before any model loads)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from conftest import members
from cos import Custom, Engine, SamplingParams, make_plan
from cos.runner import build as build_module
from cos.runner import results as results_module
from cos.runner.cli import dataset_main, precheck
from cos.runner.results import differences, write_atomically
from test_runner import CONFIGS, composed

TINY_RUN = ["dtype=float32", "method.model=tiny-expert", "method.amateur_model=tiny-amateur",
            "method.generate.temperature=0", "method.generate.max_tokens=4", "progress=false", "warmup=0"]

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


# ----------------------------------------------------------------- resume and the output folder
def _jsonl(path: Path, prompts: list[str]) -> Path:
    path.write_text("".join(json.dumps({"id": f"p{i}", "prompt": p}) + "\n" for i, p in enumerate(prompts)))
    return path


@pytest.fixture
def no_loading(tiny_env, monkeypatch):
    monkeypatch.setattr(build_module, "load_member", lambda *a, **k: pytest.fail("loaded a model"))


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    return err


def test_resume_refuses_another_data_file_or_edited_data(tiny_env, tmp_path, monkeypatch, capsys):
    first = _jsonl(tmp_path / "a.jsonl", ["Count to 1:", "Count to 2:"])
    args = ["method=cd", "dataset.name=jsonl", "dataset.size=2", *TINY_RUN, "compare_with=null"]
    out = tmp_path / "run"
    assert dataset_main(composed([*args, f"dataset.path={first}"]), out) == 0
    capsys.readouterr()
    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert len(saved["data_sha256"]) == 64 and not list(out.glob(".*.tmp"))
    monkeypatch.setattr(build_module, "load_member", lambda *a, **k: pytest.fail("loaded a model"))
    other = _jsonl(tmp_path / "b.jsonl", ["Say hi:", "Say bye:"])  # same ids p0, p1
    assert dataset_main(composed([*args, f"dataset.path={other}"]), out) == 2
    err = _one_line_error(capsys)
    assert "holds results of another configuration" in err and "dataset.path" in err and "data_sha256" in err
    _jsonl(first, ["Count to 1:", "Count to 3:"])  # the same file, edited
    assert dataset_main(composed([*args, f"dataset.path={first}"]), out) == 2
    err = _one_line_error(capsys)
    assert "data_sha256" in err and "dataset.path" not in err
    assert yaml.safe_load((out / "config.yaml").read_text()) == saved  # not rewritten to name the new data


def test_report_cells_compare_without_reading_the_data():
    """report/runs.py compares configs that carry no data digest: only both-sided digests count."""
    assert differences({"data_sha256": "a" * 64, "seed": 1}, {"seed": 1}) == []
    assert differences({"data_sha256": "a" * 64}, {"data_sha256": "b" * 64}) != []


def test_truncated_config_yaml_on_resume_is_one_line(tmp_path, no_loading, capsys):
    data = _jsonl(tmp_path / "a.jsonl", ["Count to 1:"])
    out = tmp_path / "run"
    out.mkdir()
    (out / "results.jsonl").write_text(json.dumps({"id": "p0"}) + "\n")
    (out / "config.yaml").write_text("dataset:\n  name: jsonl\n  path: '/x\n")  # cut inside a quoted string
    cfg = composed(["method=cd", "dataset.name=jsonl", f"dataset.path={data}", *TINY_RUN])
    assert dataset_main(cfg, out) == 2
    assert "config.yaml is not valid YAML (cut short or edited?" in _one_line_error(capsys)
    (out / "config.yaml").write_text("dataset:\n  name: jsonl\n")  # cut at a line boundary: valid YAML
    assert dataset_main(cfg, out) == 2
    assert "does not hold a run configuration" in _one_line_error(capsys)
    (out / "config.yaml").unlink()
    assert dataset_main(cfg, out) == 2
    assert "holds results.jsonl but no config.yaml" in _one_line_error(capsys)


def test_save_path_pointing_at_a_file_is_one_line(tmp_path, no_loading, capsys):
    data = _jsonl(tmp_path / "a.jsonl", ["Count to 1:"])
    target = tmp_path / "results.txt"
    target.write_text("not a folder")
    assert "is a file, not a folder" in precheck([f"save_path={target}"], CONFIGS)
    assert "is a file, not a folder" in precheck([f"save_path={target}/sub"], CONFIGS)
    cfg = composed(["method=cd", "dataset.name=jsonl", f"dataset.path={data}", *TINY_RUN])
    assert dataset_main(cfg, target) == 2
    assert "is a file, not a folder" in _one_line_error(capsys)
    assert dataset_main(cfg, target / "sub") == 2
    assert "cannot create the output folder" in _one_line_error(capsys)
    assert target.read_text() == "not a folder"


def test_config_is_replaced_atomically(tmp_path, monkeypatch):
    path = tmp_path / "config.yaml"
    write_atomically(path, "seed: 1\n")

    def crash(fd):
        raise KeyboardInterrupt  # killed after writing part of the new file

    monkeypatch.setattr(results_module.os, "fsync", crash)
    with pytest.raises(KeyboardInterrupt):
        write_atomically(path, "seed: 2\n" * 1000)
    assert path.read_text() == "seed: 1\n"
