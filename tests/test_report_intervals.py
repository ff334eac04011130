"""The reproduction report's statistics: paired bootstrap speedup intervals, Wilson / bootstrap quality
intervals, the busy-cell re-run, the cpu-medium grid, and a report rendered from a fabricated run folder
(intervals, busy flag, quality table, error bars) or from an old report.json without per-prompt data.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from cos.machine import Load
from cos.report import intervals, runs as runs_module
from cos.report.cells import expand
from cos.report.grid import load_grid
from cos.report.plots import error_bars
from cos.runner import run as run_module
from cos.runner.results import CONFIG, RESULTS, SUMMARY

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"


def load_script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("reproduce", ROOT / "scripts" / "reproduce.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- intervals ----------------------------------------------------------------------------------------
def test_identical_method_and_baseline_give_ratio_one_and_a_narrow_interval():
    rng = random.Random(1)
    tokens = [rng.randint(20, 64) for _ in range(16)]
    seconds = [t / rng.uniform(3, 6) for t in tokens]
    low, high = intervals.speedup_interval(tokens, seconds, tokens, seconds)
    assert low == pytest.approx(1.0) and high == pytest.approx(1.0)


def test_a_constant_2x_gives_exactly_2_2_because_resampling_is_paired():
    """Per-prompt speeds vary 4x across prompts, the method is 2x on every one: paired resampling keeps
    each prompt's two sides together, so every resample's ratio is 2; resampling the two sides with
    independent indices would spread far around it."""
    rng = random.Random(2)
    tokens = [64] * 16
    base_seconds = [64 / rng.uniform(1, 8) for _ in range(16)]
    seconds = [s / 2 for s in base_seconds]
    assert intervals.speedup_interval(tokens, seconds, tokens, base_seconds) == pytest.approx((2.0, 2.0))
    # the same data resampled unpaired (the baseline's order shuffled: the pairing broken) is wide
    shuffled = base_seconds[::-1]
    low, high = intervals.speedup_interval(tokens, seconds, tokens, shuffled)
    assert high - low > 0.5


def test_paired_interval_covers_the_ratio_of_sums_and_is_reproducible():
    rng = np.random.default_rng(3)
    base = rng.uniform(4, 20, size=24)
    seconds = base / rng.normal(1.8, 0.3, size=24)
    tokens = np.full(24, 64.0)
    point = (tokens.sum() / seconds.sum()) / (tokens.sum() / base.sum())
    low, high = intervals.speedup_interval(tokens, seconds, tokens, base)
    assert low < point < high and high - low < 0.6
    assert intervals.speedup_interval(tokens, seconds, tokens, base) == (low, high)  # fixed seed
    assert intervals.speedup_interval([], [], [], []) is None


def test_wilson_and_metric_intervals():
    low, high = intervals.wilson(8, 16)
    assert low == pytest.approx(0.2799, abs=1e-3) and high == pytest.approx(0.7201, abs=1e-3)
    assert intervals.wilson(0, 16)[0] == 0.0 and intervals.wilson(16, 16)[1] == 1.0
    assert intervals.metric_interval([1, 0] * 8) == intervals.wilson(8, 16)  # 0/1: Wilson
    rouge = [0.2, 0.3, 0.25, 0.4, 0.35, 0.3]  # anything else: bootstrap of the mean
    low, high = intervals.metric_interval(rouge)
    assert low < sum(rouge) / len(rouge) < high and 0.2 <= low and high <= 0.4


# --- a fabricated run folder ----------------------------------------------------------------------------
def fabricate(folder: Path, cfg: dict, n: int, speed: float, busy: bool, seed: int = 0, greedy: bool = True,
              gap: float | None = None) -> dict:
    """A finished cell: config.yaml, results.jsonl (n prompts, the method `speed`x its baseline per prompt,
    with noise; at T = 0 prompt 3 differs, with log r gap `gap` when given), summary.json with a load;
    returns the summary."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CONFIG).write_text(yaml.safe_dump(cfg, sort_keys=False))
    records = []
    for i in range(n):
        base_time = rng.uniform(5, 15)
        score = {"accuracy": float(i % 2)}
        records.append({"id": f"p{i}", "tokens": 64, "time": base_time / (speed * rng.uniform(0.9, 1.1)),
                        "score": score, "identical": (i != 3) if greedy else None,
                        "baseline": {"method": "cd", "tokens": 64, "time": base_time, "score": score}})
        if greedy and i == 3 and gap is not None:
            records[-1]["log_r_gap"] = gap
    (folder / RESULTS).write_text("".join(json.dumps(r) + "\n" for r in records))
    tps = sum(r["tokens"] for r in records) / sum(r["time"] for r in records)
    base_tps = 64 * n / sum(r["baseline"]["time"] for r in records)
    load = Load(2, 2.5 if busy else 0.1, 2.4 if busy else 0.2, 1.6 if busy else 0.05).as_dict()
    summary = {"complete": True, "prompts": n, "selected": n, "measured_speedup": tps / base_tps,
               "acceptance_rate": 0.7, "predicted_speedup": 1.5, "measured_over_predicted": tps / base_tps / 1.5,
               "cost_ratio": 0.39, "mean_acceptance_length": 3.0, "tokens_per_second": tps,
               "tokens_per_second_mean": tps, "quality": {"accuracy": 0.5}, "load": load,
               "compare_with": {"method": "cd", "tokens_per_second": base_tps, "quality": {"accuracy": 0.5},
                                "identical": n - 1 if greedy else 0, "greedy_compared": n if greedy else 0}}
    (folder / SUMMARY).write_text(json.dumps(summary))
    return summary


def small_grid(tmp_path: Path) -> Path:
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"id": f"p{i}", "prompt": f"Count to {i}:", "answer": "1"}) + "\n"
                            for i in range(4)))
    grid = {"name": "fab", "pairs": {"p": {"model": "tiny-expert", "other": "tiny-amateur",
                                           "methods": ["cd_sd", "cd_chef"]}},
            "datasets": {"mini": {"name": "jsonl", "path": str(data), "size": 2, "max_tokens": 8,
                                  "options": {"reference_field": "answer", "metric": "contains"}}},
            "temperatures": {"cd": [0]}, "gammas": [3],
            "run": {"dtype": "float32", "device": "cpu", "warmup": 0, "progress": False}}
    path = tmp_path / "fab.yaml"
    path.write_text(yaml.safe_dump(grid, sort_keys=False))
    return path


def test_report_renders_intervals_busy_flags_quality_and_error_bars(tmp_path, monkeypatch, capsys):
    grid_file = small_grid(tmp_path)
    grid = load_grid(grid_file, CONFIGS)
    cells = expand(grid, CONFIGS)
    out = tmp_path / "report"
    fabricate(runs_module.cell_dir(out, cells[0]), cells[0].config, 16, 2.0, busy=False, seed=1, gap=0.0123)
    fabricate(runs_module.cell_dir(out, cells[1]), cells[1].config, 16, 1.5, busy=True, seed=2)
    monkeypatch.setattr(runs_module, "run_dataset", lambda *a, **k: pytest.fail("ran a cell"))
    monkeypatch.delenv("MODEL_PATH", raising=False)
    assert load_script().main(["--grid", str(grid_file), "--out", str(out), "--readme-snippet"]) == 0
    # the cell without its gap could not load its members: said, and the report still made
    assert f"{cells[1].id}: log r gap not computed (method.model=" in capsys.readouterr().out
    data = json.loads((out / "report.json").read_text())
    md = (out / "report.md").read_text()
    sd, chef = data["cells"]
    for r in (sd, chef):
        low, high = r["speedup_interval"]
        assert low < r["measured_speedup"] < high
        assert r["quality_interval"]["accuracy"] == pytest.approx(list(intervals.wilson(8, 16)))
        assert r["standard_quality_interval"]["accuracy"] == pytest.approx(list(intervals.wilson(8, 16)))
    assert 1.7 < sd["speedup_interval"][0] and sd["speedup_interval"][1] < 2.3
    assert (sd["busy"], chef["busy"]) == (False, True)
    text = f"{chef['measured_speedup']:.2f} [{chef['speedup_interval'][0]:.2f}, {chef['speedup_interval'][1]:.2f}]"
    assert f"{text} (α .70, pred 1.50, γ3) ⚠busy" in md and text in (out / "README_snippet.md").read_text()
    assert "load 2.5 → 2.4, others 1.60 cores of 2 ⚠busy" in md
    assert "load 0.1 → 0.2, others 0.05 cores of 2 |" in md
    assert "## Quality: standard vs accelerated" in md
    quality = "accuracy 0.500 [0.280, 0.720]"
    assert f"| p | mini | 0 | `cd_sd` γ3 | 16 | {quality} | {quality} | 15/16 (gap 0.012) |" in md
    assert f"| p | mini | 0 | `cd_chef` γ3 | 16 | {quality} | {quality} | 15/16 (gap ?) |" in md
    # the plot's error bars are the intervals
    row = data["tables"]["speedup"]["cd"][1]
    below, above = error_bars([row["cells"]["mini"]])
    assert below[0] == pytest.approx(chef["measured_speedup"] - chef["speedup_interval"][0]) and above[0] > 0
    assert (out / "speedup_cd.png").read_bytes().startswith(b"\x89PNG")


def test_old_report_json_without_per_prompt_data_renders_with_n_a(tmp_path, monkeypatch):
    """reports/cpu-small: runs/ not committed, report.json from before intervals: rendered, not lost."""
    out = tmp_path / "cpu-small"
    out.mkdir()
    committed = ROOT / "reports" / "cpu-small" / "report.json"
    (out / "report.json").write_bytes(committed.read_bytes())
    monkeypatch.setattr(runs_module, "run_dataset", lambda *a, **k: pytest.fail("ran a cell"))
    assert load_script().main(["--grid", "cpu-small", "--out", str(out), "--report-only"]) == 0
    old = {r["id"]: r for r in json.loads(committed.read_text())["cells"]}
    new = json.loads((out / "report.json").read_text())["cells"]
    assert len(new) == 15 and all(r["status"] == "done" for r in new)
    for r in new:
        assert r["measured_speedup"] == old[r["id"]]["measured_speedup"]
    md = (out / "report.md").read_text()
    assert "1.90 [n/a] (α .70, pred 1.43, γ5)" in md and "15/15 cells have results" in md


# --- the busy re-run --------------------------------------------------------------------------------------
class FakeMeter:
    """LoadMeter stand-in: the machine is busy for the first `busy` measurements, quiet after."""
    busy = 1
    made = 0

    def __init__(self) -> None:
        type(self).made += 1
        self.n = type(self).made

    def stop(self) -> Load:
        busy = self.n <= type(self).busy
        return Load(2, 2.0 if busy else 0.1, 2.0 if busy else 0.1, 1.5 if busy else 0.0)


@pytest.mark.parametrize("busy, attempts, flagged", [(1, 2, False), (5, 3, True)])
def test_a_cell_measured_on_a_busy_machine_is_run_again(busy, attempts, flagged, tmp_path, monkeypatch, tiny_env):
    grid = load_grid(small_grid(tmp_path), CONFIGS)
    cell = expand(grid, CONFIGS)[1]
    monkeypatch.setattr(FakeMeter, "busy", busy)
    monkeypatch.setattr(FakeMeter, "made", 0)
    monkeypatch.setattr(run_module, "LoadMeter", FakeMeter)
    out, lines = tmp_path / "report", []
    torch.manual_seed(0)
    assert runs_module.run_cells([cell], out, echo=lines.append, busy_retries=2) == []
    folder = runs_module.cell_dir(out, cell)
    loads = [json.loads(x) for x in (folder / runs_module.LOADS).read_text().splitlines()]
    assert [x["attempt"] for x in loads] == list(range(1, attempts + 1))
    assert [x["load"]["busy"] for x in loads] == [True] * (attempts - 1) + [flagged]
    assert sorted(p.name for p in folder.glob("results.busy*.jsonl")) == [
        f"results.busy{k}.jsonl" for k in range(1, attempts)]
    assert sum("machine busy" in line for line in lines) == attempts - 1
    result = runs_module.cell_result(cell, out)
    assert (result["status"], result["busy"], result["attempts"]) == ("done", flagged, attempts)
    assert result["speedup_interval"] is not None
    # a rerun skips the finished cell, busy or not
    assert runs_module.run_cells([cell], out, echo=lines.append) == [] and lines[-1].endswith("(skipped)")


# --- the cpu-medium grid ------------------------------------------------------------------------------------
def test_cpu_medium_grid_validates_with_16_prompts_x_64_tokens_everywhere(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(runs_module, "run_dataset", lambda *a, **k: pytest.fail("ran a cell"))
    grid = load_grid("cpu-medium", CONFIGS)
    cells = expand(grid, CONFIGS)
    assert len(cells) == 30
    for c in cells:
        assert c.config["dataset"]["size"] >= 16 and c.config["method"]["generate"]["max_tokens"] >= 64, c.id
    assert {c.dataset for c in cells} >= {"humaneval", "gsm8k"} and {c.family for c in cells} == {"we", "cd"}
    assert {(c.method, c.temperature) for c in cells} == {
        (m, t) for m in ("cd_sd", "cd_chef", "we_sd", "we_chef") for t in (0, 1)} | {("we_mix", 1), ("we_mix_sd", 1)}
    assert load_script().main(["--grid", "cpu-medium", "--out", str(tmp_path / "r"), "--dry-run"]) == 0
    assert "30 cells: 0 done, 0 partial, 30 to run, 0 stale" in capsys.readouterr().out


def test_readme_snippet_replaces_only_the_grids_section(tmp_path):
    from cos.report import readme_markers, update_readme

    start, end = readme_markers("cpu-medium")
    readme = tmp_path / "README.md"
    readme.write_text(f"# title\n\nbefore\n{start}\nold table\n{end}\nafter\n")
    assert update_readme(readme, "cpu-medium", "new table\n")
    assert readme.read_text() == f"# title\n\nbefore\n{start}\nnew table\n{end}\nafter\n"
    assert not update_readme(readme, "cpu-small", "x\n")  # no markers for that grid: untouched
    assert "x\n" not in readme.read_text()
    shipped = (ROOT / "README.md").read_text()
    assert start in shipped and end in shipped.split(start, 1)[1]
