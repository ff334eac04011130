"""Every shipped config composes, passes the checks, and runs on tiny random models.

The run test goes through the same function main_dataset.py calls, on a literal jsonl dataset, greedy,
with compare_with=standard: each speculative method must reproduce its standard counterpart token
for token through the configs too.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from cos.runner.cli import dataset_main
from cos.runner.config import family, run_config
from cos.runner.schema import SCHEMA

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
METHOD_FILES = sorted(p.stem for p in (CONFIGS / "method").glob("*.yaml"))
CASE_KEYS = {"input", "stop"}


def composed(overrides: list[str], name: str = "default", hydra: bool = False):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return compose(name, overrides=overrides, return_hydra_config=hydra)


def members_for(method_file: str, same: bool = False) -> list[str]:
    """Overrides naming tiny members for a method file (same=True: identical members, all accepted)."""
    name = OmegaConf.to_container(composed([f"method={method_file}"]).method)["name"]
    other = "tiny-expert" if same else "tiny-amateur"
    if method_file == "we3_chef":
        return ["method.model=tiny-expert", f"method.extra_model=[{other},tiny-third]"]
    key = {"large_model": None, "sd": "draft_model", "cd": "amateur_model"}.get(family(name), "extra_model")
    return ["method.model=tiny-expert"] + ([f"method.{key}={other}"] if key else [])


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models on a shared 2-core machine: one thread avoids oversubscription stalls."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_every_method_file_is_shipped():
    assert {"large_model", "sd", "we", "cd", "we_sd", "cd_sd", "we_chef", "cd_chef", "we3_chef", "custom",
            "custom_chef", "we_mix", "we_mix_sd"} <= set(METHOD_FILES)


def test_default_yaml_documents_exactly_the_schema():
    raw = yaml.safe_load((CONFIGS / "default.yaml").read_text())
    raw.pop("defaults"), raw.pop("hydra")

    def keys(d, prefix=""):
        out = set()
        for k, v in d.items():
            out.add(prefix + k)
            if isinstance(v, dict) and v and k not in ("options", "combination"):
                out |= keys(v, prefix + k + ".")
        return out

    schema = keys({k: v for k, v in SCHEMA.items() if k not in CASE_KEYS})
    assert keys(raw) == {k for k in schema if not k.startswith(("dataset.options.", "method.combination."))}


@pytest.mark.parametrize("method_file", METHOD_FILES)
def test_method_file_uses_only_schema_keys(method_file):
    raw = yaml.safe_load((CONFIGS / "method" / f"{method_file}.yaml").read_text())
    raw.pop("defaults", None)
    assert set(raw) <= set(SCHEMA["method"]), set(raw) - set(SCHEMA["method"])


@pytest.mark.parametrize("config_name", ["default", "default_case"])
@pytest.mark.parametrize("method_file", METHOD_FILES)
def test_every_config_composes_and_checks(method_file, config_name):
    overrides = [f"method={method_file}", *members_for(method_file)]
    if config_name == "default_case":
        overrides.append("input='def f(x):'")
    cfg = composed(overrides, config_name, hydra=True)
    assert cfg.hydra.run.dir and cfg.hydra.sweep.dir  # the subdir needs hydra.job.num: multirun only
    del cfg.hydra
    plain = OmegaConf.to_container(cfg, resolve=True)
    run = run_config(plain)  # plan, gamma, combination, generate: validated without loading
    assert run.method.members[0] == "tiny-expert" and run.method.method == cfg.method.name


def test_output_dirs_follow_save_path():
    cfg = composed(["save_path=/tmp/somewhere"], hydra=True)
    assert cfg.hydra.run.dir == "/tmp/somewhere" and cfg.hydra.sweep.dir == "/tmp/somewhere"
    cfg = composed(["method=cd"], hydra=True)
    assert cfg.hydra.run.dir.startswith("outputs/humaneval/cd/")


@pytest.mark.parametrize("method_file", METHOD_FILES)
def test_every_method_file_runs(method_file, model_root, tmp_path, monkeypatch):
    """Each config runs end to end on 2 literal prompts; speculative ones equal their standard form."""
    monkeypatch.setenv("MODEL_PATH", str(model_root))
    data = tmp_path / "prompts.jsonl"
    rows = [{"id": "a", "prompt": "def add(a, b):\n", "answer": "return"},
            {"id": "b", "prompt": "The capital of France is", "answer": "Paris"}]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    same = method_file in ("sd", "we_sd")  # identical members: every draft accepted, multi-token rounds
    mixture = method_file in ("we_mix", "we_mix_sd")  # sampling only: T = 1, no token-for-token check
    cfg = composed([f"method={method_file}", *members_for(method_file, same=same), "dataset.name=jsonl",
                    f"dataset.path={data}", "dataset.size=full", "+dataset.options.reference_field=answer",
                    "+dataset.options.metric=contains", f"method.generate.temperature={int(mixture)}",
                    "method.generate.max_tokens=8", "warmup=0", "progress=false", "dtype=float32",
                    "compare_with=standard"])
    out = tmp_path / "out"
    assert dataset_main(cfg, out) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] and summary["prompts"] == 2 and "contains" in summary["quality"]
    if method_file in ("large_model", "we", "cd", "custom"):  # standard: compare_with=standard is a no-op
        assert summary["compare_with"] is None
    elif mixture:  # the standard counterpart ran beside it on the same prompts: a measured speedup
        assert summary["compare_with"]["method"] == "we" and summary["measured_speedup"] is not None
    else:
        c = summary["compare_with"]
        assert c["greedy_compared"] == 2 and c["identical"] == 2, c["differences"]
    if same:
        assert summary["acceptance_rate"] == 1.0 and summary["mean_acceptance_length"] > 1
