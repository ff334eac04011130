"""The log r gap at a greedy difference: what it measures, recorded live by the runner, added to old
run folders by fill_gaps, and shown in the summary and the reproduction report."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from conftest import members
from cos import Engine, make_combination, make_plan
from cos.methods.reference import reference_generate
from cos.report.tables import identity_text
from cos.runner import build as build_module
from cos.runner.build import Built
from cos.runner.compare import difference_message
from cos.runner.greedy_gap import fill_gaps, log_r_gap, record_gap
from cos.runner.results import read_records
from cos.runner.run import generate_pair
from cos.runner.summary import summary_lines
from cos.sampling import SamplingParams
from test_runner import HUMANEVAL, TINY, composed, needs_humaneval

PROMPT = [3, 17, 42, 8, 23]


def cd_engine(models, method="cd"):
    return Engine(members(models["base"], models["close"]), make_plan(method, 2, make_combination("cd", 2)))


def test_gap_is_the_log_r_margin_of_the_standard_token(models):
    engine = cd_engine(models)
    standard = reference_generate([models["base"], models["close"]], engine.plan.combination, PROMPT, 6,
                                  SamplingParams(0.0))
    i, theirs = 4, standard[4]
    gaps = {x: log_r_gap(engine, PROMPT, standard, i, x, theirs) for x in range(64)}
    assert gaps[theirs] == 0.0
    others = [g for x, g in gaps.items() if x != theirs]
    assert min(others) > 0  # the reference's greedy token is r's argmax there: every other token is below it
    assert log_r_gap(engine, PROMPT, standard, i, theirs, 7) == pytest.approx(-gaps[7], abs=1e-6)  # antisymmetric


class Altered:
    """The method under test, made to differ from standard decoding at one token (a stand-in for a bug
    or a float tie: the runner must report where, and how far from a tie)."""

    def __init__(self, engine, at: int, token: int):
        self.engine, self.at, self.token, self.plan = engine, at, token, engine.plan

    def generate(self, ids, **options):
        out = self.engine.generate(ids, **options)
        tokens = list(out.tokens)
        tokens[self.at] = self.token
        return replace(out, tokens=tokens)


def test_runner_records_the_gap_at_a_greedy_difference(models):
    baseline = cd_engine(models)
    options = dict(max_new_tokens=8, temperature=0.0, top_k=0, top_p=1.0, seed=0, stop=[])
    standard = baseline.generate(PROMPT, **options).tokens
    wrong = (standard[3] + 1) % 64
    built = Built(engine=Altered(cd_engine(models, "cd_sd"), 3, wrong), baseline=baseline, tokenizer=None, paths=[])
    record = generate_pair(built, PROMPT, options)
    assert record["identical"] is False and record["first_difference"] == 3
    expected = log_r_gap(baseline, PROMPT, standard, 3, wrong, standard[3])
    assert record["log_r_gap"] == pytest.approx(expected, abs=1e-5) and expected > 0
    assert f"log r gap {record['log_r_gap']:.4f}" in difference_message({"id": "p", **record})
    # an output that stops where the other goes on: no token to compare, no gap
    assert record_gap(baseline, PROMPT, {**record, "token_ids": standard[:3]} | {"first_difference": 3}) is None


def test_gap_shown_in_summary_and_report():
    summary = {"method": "cd_chef", "prompts": 3, "selected": 3, "quality": {}, "tokens_per_second": 1.0, "measured_speedup": 1.5,
               "acceptance_rate": 0.5, "mean_acceptance_length": 2.0, "predicted_speedup": 1.4, "drafted": 4,
               "compare_with": {"method": "cd", "tokens_per_second": 0.7, "greedy_compared": 3, "identical": 1,
                                "differences": [{"id": "a", "first_difference": 2, "log_r_gap": 0.01234},
                                                {"id": "b", "first_difference": 5, "log_r_gap": None}]}}
    assert any("on 1/3 prompts (log r gap at each first difference, near 0 = a float tie: 0.0123, ?)" in line
               for line in summary_lines(summary))
    assert identity_text({"identical": 14, "greedy_compared": 16, "greedy_gaps": [0.0031, None]}) == \
        "14/16 (gaps 0.003, ?)"
    assert identity_text({"identical": 16, "greedy_compared": 16, "greedy_gaps": []}) == "16/16"


@needs_humaneval
def test_fill_gaps_adds_the_gap_to_a_folder_written_without_it(tiny_env, tmp_path, monkeypatch):
    from cos.runner.cli import dataset_main

    out = tmp_path / "run"
    assert dataset_main(composed(["method=cd_chef", f"dataset.path={HUMANEVAL}", *TINY, "compare_with=cd"]), out) == 0
    assert fill_gaps(out) == 0  # every output identical: nothing to add
    # an older folder: one greedy difference recorded without its gap (fabricated at token 2 of prompt 0)
    records = read_records(out / "results.jsonl")
    target = records[0]
    standard = target["baseline"]["token_ids"]
    target["token_ids"] = standard[:2] + [(standard[2] + 1) % 256] + standard[3:]
    target.update(identical=False, first_difference=2)
    (out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    summary = json.loads((out / "summary.json").read_text())
    summary["compare_with"]["differences"] = [{"id": target["id"], "first_difference": 2}]
    (out / "summary.json").write_text(json.dumps(summary))

    assert fill_gaps(out) == 1
    filled = read_records(out / "results.jsonl")
    assert [r["id"] for r in filled] == [r["id"] for r in records]
    gap = filled[0]["log_r_gap"]
    assert gap > 0 and all("log_r_gap" not in r for r in filled[1:])  # standard's token is r's argmax
    assert json.loads((out / "summary.json").read_text())["compare_with"]["differences"][0]["log_r_gap"] == gap
    # done once: a second call loads no model
    monkeypatch.setattr(build_module, "build_engines", lambda *a, **k: pytest.fail("loaded a model"))
    assert fill_gaps(out) == 0
