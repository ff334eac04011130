"""Bad input fails early and clearly (issue 10): a combination's output, data files, settings a method
ignores, API arguments, member compatibility, resume. Each case names its cause before generation
(and, where the inputs allow, before any model loads)."""

from __future__ import annotations

import json
import re
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
    with pytest.raises(ValueError, match=r"custom combination test_bad_input:ten_columns .*returned shape \[2, 10\]; "
                                         r"it must return .* shape \[2, 1024\]"):
        comb.probe(V)


def test_combination_returning_a_scalar_is_refused() -> None:
    comb = Custom(n_members=2, fn=scalar, declared_space="probs")
    with pytest.raises(ValueError, match="test_bad_input:scalar .*returned float, not a tensor"):
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


# ----------------------------------------------------------------- settings a method would ignore (CLI)
WE_RUN = ["dtype=float32", "method.model=tiny-expert", "method.extra_model=tiny-amateur", "progress=false"]


@pytest.mark.parametrize("overrides, message", [
    (["method=we", *WE_RUN, "method.weights=[0.3,0.7]"], "give weights (one per member) or lambda"),
    (["method=cd", *TINY_RUN, "method.lambda=0.3"], "the cd combination would ignore lambda"),
    (["method=we_chef", *WE_RUN, "method.plausibility=0.1"], "the we combination would ignore plausibility"),
    (["method=cd_chef", *TINY_RUN, "method.bonus=exact"], "method cd_chef would ignore bonus='exact'"),
    (["method=cd", *TINY_RUN, "method.draft_threshold=0.4"], "method cd drafts nothing"),
    (["method=sd", "dtype=float32", "method.model=tiny-expert", "method.draft_model=tiny-amateur", "progress=false",
      "method.alpha=0.5"], "method sd uses one model's distribution, so it would ignore method.alpha"),
])
def test_cli_refuses_settings_a_method_ignores(overrides, message, jsonl_args, tmp_path, no_loading, capsys):
    assert dataset_main(composed([*overrides, *jsonl_args]), tmp_path / "out") == 2
    assert message in _one_line_error(capsys)


def test_cli_still_accepts_what_the_baseline_inherits(jsonl_args):
    """cd_sd with bonus=exact compares with cd, and cd_chef's draft_threshold reaches cd unused: no error."""
    from cos.runner.config import run_config
    from omegaconf import OmegaConf

    for extra in (["method=cd_sd", "method.bonus=exact"], ["method=cd_chef", "method.draft_threshold=0.4"]):
        run = run_config(OmegaConf.to_container(composed([*extra, *TINY_RUN, *jsonl_args]), resolve=True))
        assert run.baseline.plan().method == "cd" and run.baseline.plan().bonus == "none"


# ----------------------------------------------------------------- data files
@pytest.fixture
def jsonl_args(tmp_path) -> list[str]:
    return ["dataset.name=jsonl", f"dataset.path={_jsonl(tmp_path / 'ok.jsonl', ['Count to 1:', 'Count to 2:'])}"]


@pytest.mark.parametrize("lines, message", [
    (['{"id": "a", "prompt": "x"}', "", '{"id": "b", "prompt": "tab\tinside"}'], "line 3: not valid JSON"),
    (['{"id": "a", "prompt": "x"}', '["a list"]'], "line 2: expected a JSON object"),
    (['{"id": "a", "prompt": "x"}', '{"id": "b", "text": "x"}'], "line 2: no field 'prompt'"),
    (['{"id": "a", "prompt": "x"}', '{"id": "b", "prompt": ""}'], "row 2 (b) has an empty prompt"),
])
def test_bad_data_names_file_and_line_before_loading(lines, message, tmp_path, no_loading, capsys):
    data = tmp_path / "bad.jsonl"
    data.write_text("\n".join(lines) + "\n")
    cfg = composed(["method=cd", "dataset.name=jsonl", f"dataset.path={data}", "dataset.size=full", *TINY_RUN])
    assert dataset_main(cfg, tmp_path / "out") == 2
    err = _one_line_error(capsys)
    assert message in err and (str(data) in err), err


def test_humaneval_file_missing_a_field_names_the_line(tmp_path):
    from cos.datasets import get_dataset

    data = tmp_path / "he.jsonl"
    data.write_text(json.dumps({"task_id": "t/0", "prompt": "def f():\n", "test": ""}) + "\n")
    with pytest.raises(ValueError, match=r"he.jsonl, line 1: no field 'entry_point'"):
        get_dataset("humaneval").load(str(data))


# ----------------------------------------------------------------- members: vocabulary before weights
def _variant(model_root: Path, tmp_path: Path, name: str, vocab_size: int | None = None,
             extra_token: str | None = None) -> Path:
    """A model folder holding only config.json + tokenizer files (no weights: it must never load)."""
    from tiny_checkpoint import byte_tokenizer

    folder = tmp_path / name
    folder.mkdir()
    config = json.loads((model_root / "tiny-amateur" / "config.json").read_text())
    if vocab_size is not None:
        config["vocab_size"] = vocab_size
    (folder / "config.json").write_text(json.dumps(config))
    tokenizer = byte_tokenizer()
    if extra_token:
        tokenizer.add_special_tokens({"pad_token": extra_token})
    tokenizer.save_pretrained(folder)
    return folder


def test_vocabulary_mismatch_is_found_before_weights_load(model_root, tmp_path, jsonl_args, no_loading, capsys):
    bigger = _variant(model_root, tmp_path, "bigger", vocab_size=300)
    other_tok = _variant(model_root, tmp_path, "other-tokenizer", extra_token="<pad>")
    base = ["method=cd", "dtype=float32", "method.model=tiny-expert", "progress=false", *jsonl_args]
    assert dataset_main(composed([*base, f"method.amateur_model={bigger}"]), tmp_path / "o1") == 2
    assert "different vocabulary sizes in config.json" in _one_line_error(capsys)
    # different tokenizers are combined over bytes unless byte_level=false (test_byte_engine.py)
    assert dataset_main(composed([*base, f"method.amateur_model={other_tok}", "method.byte_level=false"]),
                        tmp_path / "o2") == 2
    assert "tokenizers of" in _one_line_error(capsys)
    with pytest.raises(ValueError, match="different vocabulary sizes in config.json"):  # the API, too
        Engine.from_pretrained([str(model_root / "tiny-expert"), str(bigger)], method="cd", dtype="float32")


# ----------------------------------------------------------------- API arguments
@pytest.fixture
def api_no_loading(monkeypatch):
    import cos.engine

    monkeypatch.setattr(cos.engine, "load_member", lambda *a, **k: pytest.fail("loaded a model"))


def test_api_missing_local_path_is_clear(api_no_loading, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"model folder /no/such/model does not exist: give a folder"):
        Engine.from_pretrained(["/no/such/model", "/no/such/other"], method="we")
    with pytest.raises(FileNotFoundError, match="has no config.json"):
        Engine.from_pretrained([str(tmp_path), str(tmp_path)], method="we")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_api_cuda_without_cuda_is_clear_before_loading(api_no_loading, model_root):
    paths = [str(model_root / "tiny-expert"), str(model_root / "tiny-amateur")]
    with pytest.raises(ValueError, match="device cuda asked for, but CUDA is not available here"):
        Engine.from_pretrained(paths, method="we", device="cuda")


@pytest.mark.parametrize("gamma", [2.0, True, [1, 2.0], [True, 1], "5"])
def test_api_gamma_must_be_ints(gamma, api_no_loading, model_root):
    paths = [str(model_root / "tiny-expert"), str(model_root / "tiny-amateur")]
    with pytest.raises(ValueError, match="gamma must be an int >= 1"):
        Engine.from_pretrained(paths, method="we_chef", gamma=gamma)


@pytest.mark.parametrize("kwargs, message", [
    (dict(method="we", lam=0.3, weights=[0.5, 0.5]), "give weights (one per member) or lambda"),
    (dict(method="we_chef", bonus="exact"), "method we_chef would ignore bonus='exact'"),
    (dict(method="sd", bonus="exact"), "method sd would ignore bonus='exact'"),
    (dict(method="we", draft_threshold=0.4), "method we drafts nothing"),
    (dict(method="sd", alpha=0.5), "method sd uses one model's distribution and takes no combination settings"),
    (dict(method="cd", lam=0.5), "the cd combination would ignore lambda"),
    (dict(method="we", proposer=1), "method we drafts nothing: proposer applies to *_sd and *_chef"),
])
def test_api_refuses_settings_a_method_ignores(kwargs, message, api_no_loading, model_root):
    paths = [str(model_root / "tiny-expert"), str(model_root / "tiny-amateur")]
    with pytest.raises(ValueError, match=re.escape(message)):
        Engine.from_pretrained(paths, **kwargs)


def test_api_stop_string_is_one_string(model_root):
    engine = Engine.from_pretrained([str(model_root / "tiny-expert"), str(model_root / "tiny-amateur")],
                                    method="we", dtype="float32", device="cpu")
    full = engine.generate("Hello", max_new_tokens=12, temperature=0).text
    char = next(c for c in full[1:] if c.strip())  # a character the output holds (after its first)
    assert engine.generate("Hello", max_new_tokens=12, temperature=0, stop=char + "\x01").text == full
    assert engine._stopper.stop_strings == (char + "\x01",)
    assert engine.generate("Hello", max_new_tokens=12, temperature=0, stop=[char]).text == full[:full.index(char)]


# ----------------------------------------------------------------- vLLM requests (pure Python: no vLLM here)
@pytest.mark.parametrize("extra, parameter", [
    ({"cos_temperature": -1}, "vllm_xargs.cos_temperature"),
    ({"cos_temperature": "0.7"}, "vllm_xargs.cos_temperature"),
    ({"cos_temperature": float("nan")}, "vllm_xargs.cos_temperature"),
    ({"cos_top_p": "abc"}, "vllm_xargs.cos_top_p"),
    ({"cos_top_p": 0}, "vllm_xargs.cos_top_p"),
    ({"cos_top_p": 1.5}, "vllm_xargs.cos_top_p"),
    ({"cos_top_k": 2.5}, "vllm_xargs.cos_top_k"),
    ({"cos_top_k": -3}, "vllm_xargs.cos_top_k"),
    ({"cos_top_k": True}, "vllm_xargs.cos_top_k"),
    ({"cos_temprature": 0.7}, "vllm_xargs.cos_temprature"),
])
def test_vllm_request_parameters_are_validated(extra, parameter):
    from cos.vllm_backend.request_params import InvalidCosParameter, validate_extra_args

    with pytest.raises(InvalidCosParameter) as caught:
        validate_extra_args(extra)
    assert caught.value.parameter == parameter and parameter in str(caught.value)


def test_vllm_good_request_parameters_pass():
    from cos.vllm_backend.request_params import DEFAULT, from_extra_args, validate_extra_args

    assert validate_extra_args({"cos_temperature": 0.7, "cos_top_k": 40, "cos_top_p": 0.9}) == \
        SamplingParams(0.7, 40, 0.9)
    assert validate_extra_args({"cos_temperature": 0}) == SamplingParams(0.0, 0, 1.0)
    assert validate_extra_args(None) == validate_extra_args({"other_plugin": "x"}) == DEFAULT
    assert from_extra_args({"cos_temperature": -1}) == DEFAULT  # the engine never raises


def test_vllm_admission_hook_raises_a_400_error_naming_the_parameter(monkeypatch):
    """patches.validate_at_admission() against stand-ins for the two vLLM modules it touches."""
    import sys
    import types

    class VLLMValidationError(ValueError):
        def __init__(self, message, *, parameter=None, value=None):
            super().__init__(message)
            self.parameter, self.value = parameter, value

    class InputProcessor:
        def _validate_params(self, params, supported_tasks):
            return "vllm checked"

    modules = {"vllm": types.ModuleType("vllm"), "vllm.v1": types.ModuleType("vllm.v1"),
               "vllm.v1.engine": types.ModuleType("vllm.v1.engine"),
               "vllm.v1.engine.input_processor": types.ModuleType("vllm.v1.engine.input_processor"),
               "vllm.exceptions": types.ModuleType("vllm.exceptions")}
    modules["vllm.v1.engine.input_processor"].InputProcessor = InputProcessor
    modules["vllm.exceptions"].VLLMValidationError = VLLMValidationError
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    from cos.vllm_backend import patches

    assert patches.validate_at_admission() and not patches.validate_at_admission()  # once per process
    params = types.SimpleNamespace(extra_args={"cos_top_p": "abc"})
    with pytest.raises(VLLMValidationError) as caught:
        InputProcessor()._validate_params(params, ())
    assert caught.value.parameter == "vllm_xargs.cos_top_p" and "abc" in str(caught.value)
    good = types.SimpleNamespace(extra_args={"cos_temperature": 0.5})
    assert InputProcessor()._validate_params(good, ()) == "vllm checked"
    assert InputProcessor()._validate_params(types.SimpleNamespace(extra_args=None), ()) == "vllm checked"


def test_cli_and_api_refuse_a_bad_combination_before_weights_load(model_root, jsonl_args, tmp_path, no_loading,
                                                                   api_no_loading, capsys):
    cfg = composed(["method=custom", "dtype=float32", "method.model=tiny-expert", "method.extra_model=tiny-amateur",
                    "progress=false", "compare_with=null", *jsonl_args])
    cfg.method.combination = {"target": "test_bad_input:ten_columns", "space": "probs", "kwargs": {}}
    assert dataset_main(cfg, tmp_path / "out") == 2
    assert "custom combination test_bad_input:ten_columns (probs space) returned shape [2, 10]" in _one_line_error(capsys)
    cfg.method.combination = {"target": "test_bad_input:scalar", "space": "logits", "kwargs": {}}
    assert dataset_main(cfg, tmp_path / "out") == 2
    assert "test_bad_input:scalar (logits space) returned float, not a tensor" in _one_line_error(capsys)
    paths = [str(model_root / "tiny-expert"), str(model_root / "tiny-amateur")]
    with pytest.raises(ValueError, match="test_bad_input:scalar .*returned float"):
        Engine.from_pretrained(paths, method="custom", combination=Custom(n_members=2, fn=scalar))


def test_stop_strings_one_string_is_one_stop():
    """Shared by the HF engine and VllmEngine."""
    from cos.stopping import as_stop_strings

    assert as_stop_strings("xE") == ("xE",)
    assert as_stop_strings(["x", "E"]) == ("x", "E") and as_stop_strings(None) == as_stop_strings(()) == ()
    with pytest.raises(ValueError, match="stop strings must be non-empty strings"):
        as_stop_strings(["ok", ""])


def test_vllm_admission_hook_waits_for_vllm_to_import_the_module(tmp_path, monkeypatch):
    """The plugin loads before vLLM imports its input processor: the wrap happens on that import."""
    import sys

    package = tmp_path / "vllm"
    (package / "v1" / "engine").mkdir(parents=True)
    for folder in (package, package / "v1", package / "v1" / "engine"):
        (folder / "__init__.py").write_text("")
    (package / "exceptions.py").write_text(
        "class VLLMValidationError(ValueError):\n"
        "    def __init__(self, message, *, parameter=None, value=None):\n"
        "        super().__init__(message)\n        self.parameter = parameter\n")
    (package / "v1" / "engine" / "input_processor.py").write_text(
        "class InputProcessor:\n    def _validate_params(self, params, supported_tasks):\n        return 'ok'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, name)
    from cos.vllm_backend import patches

    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))  # the hook never outlives this test
    try:
        assert patches.validate_at_admission() is False  # not imported yet: wrapped on import
        from vllm.exceptions import VLLMValidationError
        from vllm.v1.engine.input_processor import InputProcessor

        bad = type("Params", (), {"extra_args": {"cos_temperature": -1}})()
        with pytest.raises(VLLMValidationError) as caught:
            InputProcessor()._validate_params(bad, ())
        assert caught.value.parameter == "vllm_xargs.cos_temperature"
        assert not any(type(f).__name__ == "_WrapOnImport" for f in sys.meta_path)
    finally:
        for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
            del sys.modules[name]
