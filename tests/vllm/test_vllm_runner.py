"""The benchmark runner with backend=vllm end to end on tiny members: results, resume, compare_with,
main_case; greedy outputs equal backend=hf's token for token (up to floating-point near-ties of r)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from vllm_cases import GREEDY, KV_CACHE_BYTES, assert_greedy_equal

from cos.loading import load_tokenizer
from cos.runner.cli import case_main, dataset_main, plain
from cos.tokens import encode_text as encode

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
PROMPTS = ["Hello, world", "def fib(n):", "The quick brown fox", "1 + 1 =", "Once upon a time"]
VLLM = ["backend=vllm", f"vllm={{enforce_eager: true, max_model_len: 256, kv_cache_memory_bytes: {KV_CACHE_BYTES}}}"]


def composed(overrides: list[str], name: str = "default") -> dict:
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return plain(compose(name, overrides=overrides))


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def overrides(member_dirs, tmp_path_factory, monkeypatch_module) -> list[str]:
    """cd_sd (the amateur drafts 3, exact bonus) against cd on the cd2 members, greedy, 5 jsonl prompts."""
    data = tmp_path_factory.mktemp("data") / "prompts.jsonl"
    data.write_text("".join(json.dumps({"id": f"p{i}", "prompt": p}) + "\n" for i, p in enumerate(PROMPTS)))
    monkeypatch_module.setenv("COS_COMPOSITE_CACHE", str(tmp_path_factory.mktemp("composites")))
    return ["method=cd_sd", f"method.model={member_dirs['small']}", f"method.amateur_model={member_dirs['close']}",
            "method.bonus=exact", "method.proposer=1", "method.gamma=3", "dtype=float32", "compare_with=cd",
            "method.generate.temperature=0", "method.generate.max_tokens=12", "progress=false",
            "dataset.name=jsonl", f"dataset.path={data}", "dataset.size=tiny"]


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


@pytest.fixture(scope="module")
def loaded():
    """vLLM engines shared by the runs of this module (as scripts/reproduce.py shares models)."""
    engines: dict = {}
    yield engines
    for engine in engines.values():
        engine.close()


def test_dataset_run_interrupted_resumed_and_equal_to_hf(overrides, loaded, member_dirs, hf_sides, tmp_path, capsys):
    hf_out, out = tmp_path / "hf", tmp_path / "vllm"
    assert dataset_main(composed(overrides), hf_out) == 0
    cfg = composed([*overrides, *VLLM])
    seen: list[str] = []

    def stop_after_two(record):
        seen.append(record["id"])
        if len(seen) == 2:
            raise KeyboardInterrupt

    assert dataset_main(cfg, out, on_record=stop_after_two, loaded=loaded) == 130
    assert "resume with save_path=" in capsys.readouterr().err
    first_two = (out / "results.jsonl").read_text()
    resumed: list[str] = []
    assert dataset_main(cfg, out, on_record=lambda r: resumed.append(r["id"]), loaded=loaded) == 0
    assert len(resumed) == 3 and not set(resumed) & set(seen)  # rows already written were not recomputed
    assert (out / "results.jsonl").read_text().startswith(first_two)
    assert len(loaded) == 2  # the method's engine and the baseline's, started once for both runs

    records, want = lines(out / "results.jsonl"), {r["id"]: r for r in lines(hf_out / "results.jsonl")}
    assert [r["id"] for r in records] == list(want) and all(r["backend"] == "vllm" for r in records)
    assert all(r["backend"] == "hf" for r in want.values())
    tokenizer, side = load_tokenizer(str(member_dirs["small"])), hf_sides["cd2"]  # cd2: the same members and cd
    for r in records:
        ids = encode(tokenizer, r["prompt"], False, -1)
        for got, hf in ((r["token_ids"], want[r["id"]]["token_ids"]),
                        (r["baseline"]["token_ids"], want[r["id"]]["baseline"]["token_ids"])):
            assert_greedy_equal(got, hf, lambda j, got=got: side.log_r(ids + got[:j], GREEDY)[-1])
        assert r["output"] == tokenizer.decode(r["token_ids"], skip_special_tokens=True)
        assert r["baseline"]["drafted"] == 0 and r["gamma"] == [1, 3] and r["bonus"] == "exact"

    summary = json.loads((out / "summary.json").read_text())
    assert summary["backend"] == "vllm" and summary["complete"] and summary["method"] == "cd_sd"
    assert 0 < summary["accepted"] < summary["drafted"] and summary["tokens_per_second"] > 0
    c = summary["compare_with"]
    assert c["method"] == "cd" and c["identical"] == c["greedy_compared"] == 5
    # another backend is another configuration: resuming the vLLM folder on hf is refused, naming it
    capsys.readouterr()
    assert dataset_main(composed(overrides), out) == 2
    assert "backend: 'vllm' -> 'hf'" in capsys.readouterr().err


def test_main_case_on_vllm(overrides, loaded, tmp_path, capsys):
    cfg = composed([*overrides[:-3], *VLLM, "input='def add(a, b):'", f"save_path={tmp_path}"], "default_case")
    assert case_main(cfg, tmp_path, loaded=loaded) == 0
    assert "greedy identical: True" in capsys.readouterr().out
    case = json.loads((tmp_path / "case.json").read_text())
    assert case["backend"] == "vllm" and 0 < case["tokens"] == len(case["token_ids"]) <= 12 and case["drafted"] > 0


def test_main_case_drafts_by_batch_size(overrides, loaded, tmp_path, capsys):
    """vllm.speculative_by_batch reaches the speculative engine (batch 1: γ 2) and not the cd baseline."""
    by_batch = VLLM[1][:-1] + ", speculative_by_batch: [[1, 1, 2], [2, 256, 0]]}"
    cfg = composed([*overrides[:-3], VLLM[0], by_batch, "input='def add(a, b):'", f"save_path={tmp_path}"],
                   "default_case")
    assert cfg["vllm"]["speculative_by_batch"] == [[1, 1, 2], [2, 256, 0]]
    assert case_main(cfg, tmp_path, loaded=loaded) == 0
    assert "greedy identical: True" in capsys.readouterr().out
    case = json.loads((tmp_path / "case.json").read_text())
    assert case["drafted"] > 0


def run_on_both_backends(overrides: list[str], loaded: dict, tokenizer_dir: Path, side, tmp_path: Path) -> Path:
    """Run `overrides` on backend=hf, then on backend=vllm; each vLLM row's tokens equal hf's up to a
    near-tie of r under `side` (the HF view of the same composite). Returns the vLLM results folder."""
    hf_out, out = tmp_path / "hf", tmp_path / "vllm"
    assert dataset_main(composed(overrides), hf_out) == 0
    assert dataset_main(composed([*overrides, *VLLM]), out, loaded=loaded) == 0
    tokenizer = load_tokenizer(str(tokenizer_dir))
    want = {r["id"]: r["token_ids"] for r in lines(hf_out / "results.jsonl")}
    for r in lines(out / "results.jsonl"):
        ids = encode(tokenizer, r["prompt"], False, -1)
        assert_greedy_equal(r["token_ids"], want[r["id"]], lambda j, got=r["token_ids"]: side.log_r(ids + got[:j], GREEDY)[-1])
    return out


def test_cd_chef_runs_as_alternate_proposals_and_equals_hf(overrides, loaded, member_dirs, hf_sides, tmp_path):
    """cd_chef with the paper's γ [1, 3] on vLLM: the amateur drafts, the expert verifies alone and its own
    sample is withheld (cos/vllm_backend/alternate.py), while cd_sd's engine verifies with the whole
    composite. Greedy: backend=hf's tokens."""
    chef = ["method=cd_chef", overrides[1], overrides[2], "method.gamma=[1,3]", *overrides[6:]]
    out = run_on_both_backends(chef, loaded, member_dirs["small"], hf_sides["cd2"], tmp_path)
    assert json.loads((out / "summary.json").read_text())["method"] == "cd_chef"
    verified_alone = {json.loads(key[4]).get("alternate_proposals"): engine.llm.apply_model(
        lambda m: None if m.alternate is None else m.alternate.rounds)[0] for key, engine in loaded.items()}
    assert verified_alone[True] > 0  # cd_chef's engine ran verifier-only rounds
    assert verified_alone.get(False, None) is None  # cd_sd's engine (an earlier test's) has no alternate state


def test_three_members_run_alternate_proposals_and_equal_hf(overrides, loaded, member_dirs, hf_sides, tmp_path):
    """we3_chef with γ [1, 1, 3] on vLLM: the third member drafts, the other two verify together without it
    and withhold their own sample (alternate.py, n members). Greedy: backend=hf's tokens."""
    chef = ["method=we3_chef", f"method.model={member_dirs['big']}",
            f"method.extra_model=['{member_dirs['small']}','{member_dirs['close']}']", "method.combination=null",
            "method.weights=[0.3,0.2,0.5]", "method.gamma=[1,1,3]", "dtype=float32", *overrides[8:]]  # = we3's
    run_on_both_backends(chef, loaded, member_dirs["big"], hf_sides["we3"], tmp_path)
    rounds = [engine.llm.apply_model(lambda m: (len(m.members), m.alternate and m.alternate.rounds))[0]
              for engine in loaded.values()]
    assert any(n == 3 and verified for n, verified in rounds), rounds  # the group ran verifier-only rounds
