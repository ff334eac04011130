"""The benchmark runner end to end on tiny random models: files, resume, compare, sweeps, bad input.

main_dataset.py / main_case.py run in-process through Hydra (the same code path as the command line,
without paying the torch import again); one slow test runs the script as a real process.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from eval_data import data_path, needs_eval_data
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from cos.runner import build as build_module
from cos.runner.cli import dataset_main, precheck
from cos.runner.compare import compare_tokens, difference_message, first_difference
from cos.runner.config import baseline_spec
from cos.runner.resolve import resolve_model
from cos.runner.results import differences, read_records

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
HUMANEVAL = data_path("humaneval")  # the evaluation data only through COS_EVAL_DATA (tests/eval_data.py)
needs_humaneval = needs_eval_data("humaneval", "test.jsonl")
TINY = ["dataset.size=tiny", "dtype=float32", "method.model=tiny-expert", "method.amateur_model=tiny-amateur",
        "method.generate.temperature=0", "method.generate.max_tokens=16", "progress=false"]
SUMMARY_KEYS = {"quality", "tokens_per_second", "tokens_per_second_mean", "acceptance_rate",
                "mean_acceptance_length", "predicted_speedup", "measured_speedup", "complete", "compare_with"}
RECORD_KEYS = {"id", "prompt", "output", "tokens", "token_ids", "time", "acceptance_rate",
               "mean_acceptance_length", "drafted", "accepted", "rounds", "score"}


def load_script(relpath: str):
    spec = importlib.util.spec_from_file_location(Path(relpath).name, ROOT / f"{relpath}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_script(name: str, argv: list[str], monkeypatch) -> int:
    """Call a Hydra entry point in-process, as `python <name>.py argv...` would.

    Hydra's logging setup is left out: its dictConfig closes every live handler, and a handler that
    absl (imported by rouge_score in other tests) bound to pytest's capture stream closes that stream.
    """
    argv = [*argv, "hydra/job_logging=none", "hydra/hydra_logging=none"]
    monkeypatch.setattr(sys, "argv", [f"{name}.py", *argv])
    try:
        load_script(name).main()
    except SystemExit as e:
        return e.code
    return 0


def composed(overrides: list[str]):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return compose("default", overrides=overrides)


@pytest.fixture
def prompts(tmp_path) -> list[str]:
    """Overrides for a literal jsonl dataset of 6 prompts (no shared data needed)."""
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"id": f"p{i}", "prompt": f"Count to {i}:"}) + "\n" for i in range(6)))
    return ["dataset.name=jsonl", f"dataset.path={data}"]


@pytest.fixture(autouse=True)
def env(tiny_env):
    """MODEL_PATH -> the tiny models, one torch thread (conftest.tiny_env)."""


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# --- end to end -------------------------------------------------------------------------------------
@needs_humaneval
def test_sweep_of_a_standard_and_a_cos_method_then_collect(tmp_path, monkeypatch, capsys):
    sweep = tmp_path / "sweep"
    code = run_script("main_dataset", ["-m", "method=cd,cd_chef", f"dataset.path={HUMANEVAL}", *TINY,
                                       f"save_path={sweep}"], monkeypatch)
    assert code == 0
    for job, method in (("0-humaneval-cd", "cd"), ("1-humaneval-cd_chef", "cd_chef")):
        out = sweep / job
        assert (out / "config.yaml").is_file() and (out / ".hydra" / "config.yaml").is_file()
        records = lines(out / "results.jsonl")
        assert len(records) == 5 and RECORD_KEYS <= set(records[0])
        assert all(0 < r["tokens"] <= 16 and r["tokens"] == len(r["token_ids"]) for r in records)
        summary = json.loads((out / "summary.json").read_text())
        assert SUMMARY_KEYS <= set(summary) and summary["complete"] and summary["method"] == method
        assert "pass@1" in summary["quality"] and summary["tokens_per_second"] > 0
    chef = json.loads((sweep / "1-humaneval-cd_chef" / "summary.json").read_text())
    assert chef["drafted"] > 0 and chef["gamma"] == [1, 5] and chef["predicted_speedup"] is not None
    # the two runs are the same greedy decoding: outputs identical
    assert [r["token_ids"] for r in lines(sweep / "0-humaneval-cd" / "results.jsonl")] == \
           [r["token_ids"] for r in lines(sweep / "1-humaneval-cd_chef" / "results.jsonl")]

    reproduce = load_script("scripts/reproduce")
    capsys.readouterr()
    assert reproduce.main(["collect", str(sweep)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].startswith("| run | dataset | method |") and len(table) == 4
    assert "| cd |" in table[2] and "| cd_chef |" in table[3] and "[1,5]" in table[3]


@needs_humaneval
def test_interrupted_after_two_prompts_then_resumed_with_compare(tmp_path, capsys):
    out = tmp_path / "run"
    cfg = composed(["method=cd_chef", f"dataset.path={HUMANEVAL}", *TINY, "compare_with=cd"])
    seen = []

    def stop_after_two(record):
        seen.append(record["id"])
        if len(seen) == 2:
            raise KeyboardInterrupt

    assert dataset_main(cfg, out, on_record=stop_after_two) == 130
    assert "resume with save_path=" in capsys.readouterr().err
    first_two = (out / "results.jsonl").read_text()
    assert len(first_two.splitlines()) == 2 and not (out / "summary.json").exists()
    with (out / "results.jsonl").open("a") as f:  # killed in the middle of writing prompt 3
        f.write('{"id": "HumanEval/cut-sh')

    resumed = []
    assert dataset_main(cfg, out, on_record=lambda r: resumed.append(r["id"])) == 0
    assert len(resumed) == 3 and not set(resumed) & set(seen)  # finished prompts were not redone
    text = (out / "results.jsonl").read_text()
    assert text.startswith(first_two) and len(text.splitlines()) == 5
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] and summary["prompts"] == 5
    c = summary["compare_with"]
    assert c["method"] == "cd" and c["identical"] == c["greedy_compared"] == 5 and c["differences"] == []
    assert summary["measured_speedup"] == c["speedup"] > 0 and summary["measured_over_predicted"] is not None

    # a run already complete does no work and loads no model; another gamma is refused, naming it
    assert dataset_main(cfg, out, on_record=lambda r: pytest.fail("redid a prompt")) == 0
    capsys.readouterr()
    other = composed(["method=cd_chef", f"dataset.path={HUMANEVAL}", *TINY, "compare_with=cd", "method.gamma=[1,3]"])
    assert dataset_main(other, out) == 2
    err = capsys.readouterr().err.strip()
    assert "method.gamma: [1, 5] -> [1, 3]" in err and len(err.splitlines()) == 1


def test_main_case_prints_text_and_statistics(tmp_path, monkeypatch, capsys):
    code = run_script("main_case", ["input='def add(a, b):'", "method=cd_chef", *TINY, "compare_with=cd",
                                    f"save_path={tmp_path / 'case'}"], monkeypatch)
    assert code == 0
    printed = capsys.readouterr().out
    assert "acceptance_rate" in printed and "tokens_per_second" in printed and "greedy identical: True" in printed
    case = json.loads((tmp_path / "case" / "case.json").read_text())
    assert case["identical"] is True and case["tokens"] == len(case["token_ids"]) > 0


# --- bad input: one line, exit code 2, nothing loaded -------------------------------------------------
@pytest.mark.parametrize("overrides, message", [
    (["dataset.name=nosuch"], "unknown dataset 'nosuch'"),
    (["dataset.size=huge"], 'dataset.size must be "tiny" (5), "small" (200), "full" (all) or a positive integer'),
    (["dataset.size=0"], "dataset.size must be"),
    (["method.gamma=[1,2,3]"], "gamma [1, 2, 3] has 3 entries for 2 members"),
    (["method.gamma=0"], "gamma must be an int >= 1"),
    (["method.model=no-such-model"], "method.model=no-such-model: no model folder"),
    (["method.amateur_model=/no/such/folder"], "method.amateur_model: model folder /no/such/folder does not exist"),
    (["+method.gamm=3"], "unknown config key method.gamm (did you mean method.gamma?)"),
    (["method.name=nosuch"], "unknown method 'nosuch'"),
    (["method.extra_model=tiny-third"], "method cd_chef takes members model + amateur_model: unset method.extra_model"),
    (["compare_with=we"], "compare_with=we cannot run on the members of method cd_chef"),
    (["method.generate.temperature=-1"], "temperature must be >= 0"),
    (["dtype=float8"], "unknown dtype 'float8'"),
    (["device=[cpu,cpu,cpu]"], "device has 3 entries for 2 members"),
    (["method.alpha=-1"], "contrastive alpha must be >= 0"),
    (["method.draft_threshold=1.5"], "draft_threshold must be a probability in [0, 1)"),
    (["backend=tpu"], "backend must be one of hf, vllm, got 'tpu'"),
    (["backend=vllm", "method.gamma=[5,5]"], "method cd_chef with gamma=[5, 5]: on vLLM the verifiers propose only "
                                             "their own withheld token (γ = 1, the paper's setting): set "
                                             "method.gamma=[1, k]"),
    (["backend=vllm", "method.name=cd_sd"], "method cd_sd with bonus='none': vLLM's rejection sampler always draws"),
    (["backend=vllm", "method.name=cd_sd", "method.bonus=exact", "method.schedule=adaptive"],
     "method.schedule=adaptive does not apply on backend=vllm"),
    (["backend=vllm", "method.name=cd", "compare_with=cd_sd"], "compare_with=cd_sd with bonus='none'"),
    (["backend=vllm", "method.name=cd", "device=cpu"], "backend=vllm places the model and picks its kernels itself: "
                                                       "device='cpu' would be ignored"),
    (["backend=vllm", "method.name=cd", "dtype=[float32,bfloat16]"], "backend=vllm runs every member in one dtype"),
    (["vllm={max_model_len: 64}"], "applies to backend=vllm only"),
])
def test_bad_input_is_one_line_before_any_model_loads(overrides, message, prompts, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(build_module, "load_member", lambda *a, **k: pytest.fail("loaded a model"))
    cfg = composed(["method=cd_chef", *prompts, *TINY, *overrides])
    assert dataset_main(cfg, tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1 and message in err, err
    assert not (tmp_path / "out" / "results.jsonl").exists()


def test_missing_model_path_says_what_to_set(prompts, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("MODEL_PATH")
    monkeypatch.setattr(build_module, "load_member", lambda *a, **k: pytest.fail("loaded a model"))
    assert dataset_main(composed(["method=cd", *prompts, *TINY]), tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert "MODEL_PATH is not set: add MODEL_PATH=<folder of your models> to .env" in err


@pytest.mark.parametrize("argv, message", [
    (["method=nosuch"], "unknown method 'nosuch': use method=<one of cd, cd_chef,"),
    (["-m", "method=cd,cdd_chef"], "unknown method 'cdd_chef'"),
    (["method.gamm=3"], "unknown config key method.gamm (did you mean method.gamma?)"),
    (["temperature=0"], "unknown config key temperature (did you mean method.generate.temperature?)"),
    (["dataset.sise=tiny"], "unknown config key dataset.sise (did you mean dataset.size?)"),
])
def test_command_line_precheck(argv, message):
    assert message in precheck(argv, CONFIGS)


def test_precheck_passes_good_and_advanced_arguments():
    assert precheck(["-m", "method=cd,cd_chef", "method.gamma=[1,5],[1,3]", "dataset.options.metric=x",
                     "+method.extra=1", "hydra.run.dir=x", "method.combination.kwargs.lam=2"], CONFIGS) is None


@pytest.mark.slow
def test_script_as_a_process_exits_2_with_one_line(tmp_path):
    env = {**os.environ, "MODEL_PATH": str(tmp_path), "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, str(ROOT / "main_dataset.py"), "method=cd_chef", "method.model=a",
                           "method.amateur_model=b", "method.gamma=[1,2,3]", f"save_path={tmp_path / 'out'}"],
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 2, proc.stderr
    expected = "error: gamma [1, 2, 3] has 3 entries for 2 members; give one per member in config order, or one int"
    assert proc.stderr.strip().splitlines() == [expected]


# --- pieces -------------------------------------------------------------------------------------------
def test_resolve_model(tmp_path, model_root, monkeypatch):
    expert = str(model_root / "tiny-expert")
    assert resolve_model("tiny-expert", model_path=str(model_root)) == expert
    assert resolve_model(expert, model_path="") == expert  # absolute: MODEL_PATH not needed
    assert resolve_model("Qwen/Qwen2.5-Coder-0.5B-Instruct", model_path="") == "Qwen/Qwen2.5-Coder-0.5B-Instruct"
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="has no config.json"):
        resolve_model("empty", model_path=str(tmp_path))
    with pytest.raises(ValueError, match="method.model is not set"):
        resolve_model(None)
    monkeypatch.setenv("COS_MODEL_CACHE", str(tmp_path / "cache"))
    with pytest.raises(FileNotFoundError, match="python -m cos.models pull smollm2-135m-instruct"):
        resolve_model("smollm2-135m-instruct", model_path=str(tmp_path))


def test_read_records_drops_only_a_cut_last_line(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text('{"id": "a"}\n{"id": "b"}\n{"id": "c", "out')
    assert [r["id"] for r in read_records(path)] == ["a", "b"]
    assert path.read_text() == '{"id": "a"}\n{"id": "b"}\n'
    path.write_text('{"id": "a"}\nnot json\n{"id": "c"}\n')
    with pytest.raises(ValueError, match="line 2 of"):
        read_records(path)


def test_first_difference_and_its_report():
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert first_difference([1, 2], [1, 2, 3]) == 2
    assert compare_tokens([1, 2], [1, 3], greedy=True) == {"identical": False, "first_difference": 1}
    assert compare_tokens([1, 2], [1, 3], greedy=False) == {"identical": None, "first_difference": None}
    record = {"id": "p7", "token_ids": [4, 9], "first_difference": 1,
              "baseline": {"method": "cd", "token_ids": [4, 8, 1]}}
    assert difference_message(record) == "prompt p7: greedy output differs from cd at token 1 (9 vs 8)"


def test_encode_chat_template_and_max_prompt_len(model_root):
    from transformers import AutoTokenizer

    from cos.tokens import encode_text as encode

    tok = AutoTokenizer.from_pretrained(model_root / "tiny-expert")
    assert encode(tok, "hello world", False, -1) == list(b"hello world")  # byte-level: one id per byte
    assert encode(tok, "hello world", False, 5) == list(b"world")  # the last max_prompt_len tokens
    tok.chat_template = "{% for m in messages %}<u>{{ m['content'] }}{% endfor %}{% if add_generation_prompt %}<a>{% endif %}"
    assert tok.decode(encode(tok, "hi", True, -1)) == "<u>hi<a>"


def test_chat_template_asked_for_but_absent_is_one_line(prompts, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(build_module, "load_member", lambda *a, **k: pytest.fail("loaded a model"))
    assert dataset_main(composed(["method=cd", *prompts, *TINY, "dataset.chat_template=true"]), tmp_path / "o") == 2
    assert "has no chat template: set dataset.chat_template=false" in capsys.readouterr().err


def test_build_engine_from_a_composed_config():
    engine = build_module.build_engine(composed(["method=cd_chef", *TINY]))
    assert engine.plan.method == "cd_chef" and engine.plan.gammas == [1, 5] and engine.plan.proposer == 1
    out = engine.generate("def f(x):", max_new_tokens=6, temperature=0)
    assert len(out.tokens) == 6 and out.stats.drafted > 0


def test_draft_threshold_reaches_the_plan_and_not_the_baseline():
    cfg = composed(["method=cd_chef", "method.draft_threshold=0.4", *TINY])
    assert build_module.build_engine(cfg).plan.draft_threshold == 0.4
    method = OmegaConf.to_container(cfg["method"], resolve=True)
    assert baseline_spec(method, "standard").plan().draft_threshold == 0.0  # cd drafts nothing


def test_a_folder_written_before_backend_existed_resumes_on_hf_only():
    cfg = OmegaConf.to_container(composed(["method=cd_chef", *TINY]), resolve=True)
    older = {k: v for k, v in cfg.items() if k not in ("backend", "vllm")}
    assert cfg["backend"] == "hf" and differences(older, cfg) == []
    assert differences(older, {**cfg, "backend": "vllm"}) == ["backend: 'hf' -> 'vllm'"]


def test_a_folder_written_before_draft_threshold_existed_still_resumes():
    cfg = OmegaConf.to_container(composed(["method=cd_chef", *TINY]), resolve=True)
    older = {**cfg, "method": {k: v for k, v in cfg["method"].items() if k != "draft_threshold"}}
    assert differences(older, cfg) == []
    assert differences(older, {**cfg, "method": {**cfg["method"], "draft_threshold": 0.4}}) != []


@pytest.mark.parametrize("overrides", [
    ["method=cd"], ["method=we_sd", "method.bonus=exact"], ["method=custom"], ["method=large_model"],
    ["method=sd", "method.draft_model=tiny-amateur"]], ids=["cd", "we_sd", "custom", "large_model", "sd"])
def test_vllm_composites_hold_the_methods_combination(overrides, tmp_path, monkeypatch):
    """backend=vllm builds (once, then reuses) a composite whose r is the method's own, without vLLM."""
    from cos import SamplingParams
    from cos.runner.build import check_before_loading
    from cos.runner.config import run_config
    from cos.runner.vllm_build import combination_spec
    from cos.vllm_backend import CompositeSpec
    from cos.vllm_backend.composite_cache import cached_composite

    monkeypatch.setenv("COS_COMPOSITE_CACHE", str(tmp_path))
    members = {"method=cd": ["method.amateur_model=tiny-amateur"], "method=sd": [], "method=large_model": []}
    extra = members.get(overrides[0], ["method.extra_model=tiny-amateur"])
    cfg = OmegaConf.to_container(composed([*overrides, "method.model=tiny-expert", *extra, "backend=vllm"]),
                                 resolve=True)
    run = run_config(cfg)
    paths = check_before_loading(run)
    in_composite = paths[:1] if run.method.method in ("sd", "large_model") else paths
    folder = cached_composite(in_composite, combination_spec(run.method))
    assert cached_composite(in_composite, combination_spec(run.method)) == folder  # built once
    composite = CompositeSpec.load(folder)
    assert [str(m.path) for m in composite.members] == [str(Path(p).resolve()) for p in in_composite]
    plan = run.method.plan()
    logits = [torch.randn(3, 40, generator=torch.Generator().manual_seed(i)) for i in range(len(in_composite))]
    for params in (SamplingParams(temperature=0), SamplingParams(temperature=0.7, top_k=5, top_p=0.9)):
        assert torch.allclose(composite.combination.distribution(logits, params),
                              plan.combination.distribution(logits, params))
    saved = json.loads((folder / "generation_config.json").read_text())
    assert not {"temperature", "top_p", "top_k", "repetition_penalty", "do_sample"} & set(saved)


def test_tree_runs_from_the_config_and_equals_its_standard_method(tmp_path, prompts):
    """method.tree reaches the plan (schedule fixed by default), not the baseline; the greedy outputs equal
    compare_with=standard's and the summary names the tree."""
    cfg = composed(["method=cd_chef", "method.tree={nodes: 8, width: 2}", *prompts, *TINY, "compare_with=standard"])
    engine = build_module.build_engine(cfg)
    assert engine.plan.tree.nodes == 8 and engine.plan.schedule == "fixed"
    assert baseline_spec(OmegaConf.to_container(cfg["method"], resolve=True), "standard").plan().tree is None
    assert dataset_main(cfg, tmp_path / "out") == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["tree"] == "nodes 8 width 2" and summary["compare_with"]["identical"] == summary["prompts"]
    with pytest.raises(ValueError, match="drafts no tree, so it would ignore method.tree"):
        build_module.build_engine(composed(["method=cd", "method.tree=8x2", *TINY]))
