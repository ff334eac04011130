"""ByteEngine: members with different tokenizers through Engine.from_pretrained, every byte-level method
against the naive byte-level reference, stopping, statistics, log r of a continuation over bytes, bad input.
Tiny models saved with tokenizers (tests/tiny_checkpoint.py): tiny-expert reads bytes, tiny-merged has merges
of its own, so the two vocabularies differ."""

from __future__ import annotations

import json
import logging
import math

import pytest
import torch

from cos import Engine, SamplingParams
from cos.byte_level.combined import combined_law
from cos.byte_level.engine import ByteEngine
from cos.byte_level.generate import start_all

PROMPT = "def the tin"


@pytest.fixture(scope="module")
def paths(model_root):
    torch.set_num_threads(1)
    return [str(model_root / "tiny-expert"), str(model_root / "tiny-merged")]


def engine(paths, method="we", **options) -> ByteEngine:
    return Engine.from_pretrained(paths, method, device="cpu", dtype="float32", threads=None, **options)


def test_different_tokenizers_switch_to_bytes_with_the_reason_logged(paths, caplog):
    with caplog.at_level(logging.INFO, logger="cos.engine"):
        e = engine(paths, "we_chef")
    assert isinstance(e, ByteEngine) and e.plan.method == "we_chef"
    assert "combined over bytes" in caplog.text and "tokenizers" in caplog.text and "differ" in caplog.text
    same = [paths[0], paths[0].replace("tiny-expert", "tiny-amateur")]
    assert not isinstance(engine(same, "we"), ByteEngine)
    assert isinstance(engine(same, "we", byte_level=True), ByteEngine)


def test_refusals_name_the_fix(paths):
    with pytest.raises(ValueError, match="byte_level: auto or true"):
        engine(paths, "we", byte_level=False)
    same = [paths[0], paths[0].replace("tiny-expert", "tiny-amateur")]
    with pytest.raises(ValueError, match="prune apply over bytes only"):
        engine(same, "we", prune=1e-3)
    with pytest.raises(ValueError, match="not built over bytes"):
        engine(paths, "we_mix")
    with pytest.raises(ValueError, match="byte_level must be"):
        engine(paths, "we", byte_level="yes")
    e = engine(paths, "we")
    with pytest.raises(ValueError, match="own tokenizer"):
        e.generate([1, 2, 3], max_new_tokens=4)
    with pytest.raises(ValueError, match="eos_token_ids"):
        e.generate(PROMPT, max_new_tokens=4, eos_token_ids=[3])


@pytest.mark.parametrize("standard,methods", [("we", ["we_sd", "we_chef"]), ("cd", ["cd_sd", "cd_chef"])])
def test_every_method_over_bytes_gives_the_standard_text_under_greedy(paths, standard, methods):
    reference = engine(paths, standard)
    expected = [reference.generate(p, max_new_bytes=40, max_new_tokens=None, temperature=0).text
                for p in (PROMPT, "in the re")]
    for method in methods:
        for schedule in ("fixed", "adaptive"):
            e = engine(paths, method, schedule=schedule, draft_bytes=6)
            for _ in range(2):  # the second request starts from the measured choice of rounds
                for prompt, text in zip((PROMPT, "in the re"), expected):
                    out = e.generate(prompt, max_new_bytes=40, max_new_tokens=None, temperature=0)
                    assert out.text == text, (method, schedule, prompt)
                    assert out.stats.drafted > 0 or out.stats.round_kinds.get("naive")
            if schedule == "fixed":
                assert "naive" not in out.stats.round_kinds and out.stats.drafted > 0
                drafters = {"draft:0", "draft:1"} if method.endswith("chef") else {f"draft:{e.plan.proposer}"}
                assert set(out.stats.round_kinds) == drafters


def test_statistics_over_bytes(paths):
    out = engine(paths, "we_chef").generate(PROMPT, max_new_bytes=30, max_new_tokens=None, temperature=0)
    s = out.stats
    assert s.new_bytes == len(out.tokens) and s.bytes_per_second > 0  # random tiny models: not always UTF-8
    assert s.stop_reason in ("length", "eos") and sum(s.round_kinds.values()) == s.rounds > 0
    assert [m.name for m in s.members] == [str(p) for p in paths] and all(m.calls > 0 for m in s.members)
    assert s.byte_level["prune"] == [1e-4, 1e-4] and len(s.byte_level["pruned"]) == 2
    assert s.as_dict()["bytes_per_second"] == s.bytes_per_second


def test_stop_strings_and_budgets_cut_exactly(paths):
    """Compared as bytes: random tiny models emit bytes that are not always UTF-8."""
    for method, options in (("we", {}), ("we_chef", {"schedule": "fixed"})):
        e = engine(paths, method, **options)
        full = bytes(e.generate(PROMPT, max_new_bytes=40, max_new_tokens=None, temperature=0).tokens)
        ascii_at = [i for i in range(3, len(full)) if 32 < full[i] < 127]
        assert ascii_at, full
        stop = chr(full[ascii_at[0]])
        cut = e.generate(PROMPT, max_new_bytes=40, max_new_tokens=None, temperature=0, stop=[stop])
        assert bytes(cut.tokens) == full[: full.index(stop.encode())] and cut.stats.stop_reason == "stop_string"
        short = e.generate(PROMPT, max_new_bytes=7, max_new_tokens=None, temperature=0)
        assert bytes(short.tokens) == full[:7] and short.stats.stop_reason == "length"
        counted = e.generate(PROMPT, max_new_tokens=5, temperature=0)  # tokens of the first member's tokenizer
        # the shortest text of 5 bytes or more that is 5 tokens or more (a byte that is not UTF-8 decodes to
        # U+FFFD: 3 byte tokens); counting starts at 5 bytes, as a token spells at least one
        data = bytes(counted.tokens)
        assert full.startswith(data) and counted.stats.stop_reason == "length" and counted.stats.new_tokens >= 5
        assert len(data) == 5 or e.count_tokens(data[:-1]) < 5


def test_sampling_same_seed_same_text_under_a_fixed_schedule(paths):
    """Under the adaptive schedule the seed fixes the law, not the draw (rounds are chosen by measured time)."""
    e = engine(paths, "cd_chef", schedule="fixed")
    run = lambda seed: e.generate(PROMPT, max_new_bytes=24, max_new_tokens=None, temperature=1.0, seed=seed).text  # noqa: E731
    assert run(3) == run(3)


def test_loglikelihood_is_log_r_of_the_continuations_bytes(paths):
    e = engine(paths, "cd")
    continuation = " the"
    logp, greedy = e.loglikelihood(PROMPT, continuation)
    start_all(e.members, e.plan.combination, e.encode(PROMPT))
    expected = 0.0
    for symbol in continuation.encode():
        expected += math.log(float(combined_law(e.members, e.plan.combination, SamplingParams())[symbol]))
        for m in e.members:
            m.advance(symbol)
    assert logp == pytest.approx(expected, rel=1e-4, abs=1e-4)
    greedy = bytes(e.generate(PROMPT, max_new_bytes=6, max_new_tokens=None, temperature=0).tokens)
    assert e.loglikelihood(PROMPT, greedy)[1] is True
    assert e.loglikelihood(PROMPT, bytes([greedy[0] ^ 1]))[1] is False


# ----------------------------------------------------------------- the runner: members with different tokenizers in one config
def test_runner_over_bytes_with_compare_and_resume(model_root, tmp_path, monkeypatch, capsys):
    from test_runner import composed

    from cos.runner.cli import dataset_main
    from cos.runner.results import read_records

    monkeypatch.setenv("MODEL_PATH", str(model_root))
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"id": f"p{i}", "prompt": f"def the tin {i}"}) + "\n" for i in range(3)))
    overrides = ["method=we_chef", "dataset.name=jsonl", f"dataset.path={data}", "dtype=float32",
                 "method.model=tiny-expert", "method.extra_model=tiny-merged", "method.generate.temperature=0",
                 "method.generate.max_tokens=12", "progress=false", "compare_with=we", "method.draft_bytes=6",
                 "method.schedule=fixed"]  # fixed: drafts every round (adaptive may measure naive steps faster)
    out = tmp_path / "run"
    assert dataset_main(composed(overrides), out) == 0
    records = read_records(out / "results.jsonl")
    assert len(records) == 3 and all(r["identical"] for r in records)
    assert all(r["bytes"] == len(r["token_ids"]) and r["bytes_per_second"] > 0 and r["byte_level"] for r in records)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["compare_with"]["identical"] == 3 and summary["bytes_per_second"] > 0
    assert summary["byte_level"]["prune"] == [1e-4, 1e-4] and summary["drafted"] > 0
    assert "over bytes" in capsys.readouterr().out
    assert dataset_main(composed(overrides), out) == 0  # resumed: nothing left to generate
    assert len(read_records(out / "results.jsonl")) == 3


def test_runner_refuses_byte_options_on_one_tokenizer_before_loading(model_root, tmp_path, monkeypatch, capsys):
    from test_runner import composed

    from cos.runner.cli import dataset_main

    monkeypatch.setenv("MODEL_PATH", str(model_root))
    data = tmp_path / "prompts.jsonl"
    data.write_text(json.dumps({"id": "p0", "prompt": "x"}) + "\n")
    base = ["method=we", "dataset.name=jsonl", f"dataset.path={data}", "method.model=tiny-expert", "progress=false"]
    assert dataset_main(composed(base + ["method.extra_model=tiny-amateur", "method.prune=0.001"]), tmp_path / "a") == 2
    assert "apply over bytes only" in capsys.readouterr().err
    assert dataset_main(composed(base + ["method.extra_model=tiny-merged", "method.byte_level=maybe"]), tmp_path / "b") == 2
    assert "byte_level must be" in capsys.readouterr().err


def test_main_case_over_bytes(model_root, tmp_path, monkeypatch, capsys):
    from test_runner import run_script

    monkeypatch.setenv("MODEL_PATH", str(model_root))
    code = run_script("main_case", ["input='def the tin'", "method=cd_chef", "method.model=tiny-expert",
                                    "method.amateur_model=tiny-merged", "dtype=float32", "method.generate.temperature=0",
                                    "method.generate.max_tokens=8", "compare_with=cd", f"save_path={tmp_path / 'case'}"],
                      monkeypatch)
    assert code == 0
    printed = capsys.readouterr().out
    assert "bytes_per_second" in printed and "greedy identical: True" in printed
    case = json.loads((tmp_path / "case" / "case.json").read_text())
    assert case["identical"] is True and case["bytes"] == len(case["token_ids"]) > 0
