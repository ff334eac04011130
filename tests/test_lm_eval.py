"""lm-evaluation-harness model `cos` (src/cos/lm_eval) on tiny random members: a local generate_until task
through lm-eval's own evaluator (no hub: the task and its data are written here), every method's greedy
outputs against standard decoding, log r against a hand computation, and bad model_args refused first.
"""

from __future__ import annotations

import functools
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import cos.lm_eval  # noqa: F401 (registers --model cos)
from cos import Engine
from cos.lm_eval import model as model_module
from cos.runner import build as build_module

lm_eval = pytest.importorskip("lm_eval")
from lm_eval.api.instance import Instance  # noqa: E402
from lm_eval.api.registry import get_model  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TASKS = ROOT / "src" / "cos" / "lm_eval" / "tasks"
PAIR = "tiny-expert|tiny-amateur"
PROMPTS = ["Q: 2 + 3 = ?\nA:", "Q: the capital of France?\nA:", "Q: spell cat\nA:"]
MAX_GEN_TOKS = 12
TASK = """task: tiny_copy
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
output_type: generate_until
test_split: test
doc_to_text: "{{{{prompt}}}}"
doc_to_target: "{{{{target}}}}"
generation_kwargs:
  until: ["Q:"]
  max_gen_toks: {max_gen_toks}
  do_sample: false
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""


@pytest.fixture(autouse=True)
def env(tiny_env, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")


def standard_outputs(model_root, method: str, **kw) -> list[str]:
    """What standard decoding of the pair produces for PROMPTS, straight from the Engine (no lm-eval)."""
    paths = [str(model_root / name) for name in PAIR.split("|")]
    engine = Engine.from_pretrained(paths, method=method, dtype="float32", threads=None, kernels=False, **kw)
    tok = engine.tokenizer
    return [engine.generate(tok(p, add_special_tokens=False)["input_ids"], max_new_tokens=MAX_GEN_TOKS, temperature=0,
                            stop=["Q:"]).text for p in PROMPTS]


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory, model_root):
    """A local generate_until task whose targets are the standard outputs for prompts 0 and 2 and
    something else for prompt 1: exact_match must be 2/3 exactly."""
    folder = tmp_path_factory.mktemp("tasks")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MODEL_PATH", str(model_root))
        expected = standard_outputs(model_root, "cd")
    targets = [expected[0], expected[1] + " (not what the model says)", expected[2]]
    data = folder / "tiny_copy.jsonl"
    data.write_text("".join(json.dumps({"prompt": p, "target": t}) + "\n" for p, t in zip(PROMPTS, targets)))
    (folder / "tiny_copy.yaml").write_text(TASK.format(data=data, max_gen_toks=MAX_GEN_TOKS))
    return folder, expected


def evaluate(task_dir, model_args: str) -> dict:
    """The local task through lm-eval's evaluator, the model built from its name and argument string."""
    return lm_eval.simple_evaluate(model="cos", model_args=model_args, tasks=["tiny_copy"],
                                   task_manager=TaskManager(include_path=str(task_dir), include_defaults=False), log_samples=True)


def responses(results: dict) -> list[str]:
    samples = sorted(results["samples"]["tiny_copy"], key=lambda s: s["doc_id"])
    return [s["filtered_resps"][0] for s in samples], [s["target"] for s in samples]


# ----------------------------------------------------------------- generate_until through lm-eval
@pytest.mark.parametrize("method, extra", [
    ("cd", ""), ("cd_chef", ",gamma=1|4"), ("cd_sd", ",gamma=3"), ("we", ",lambda=0.4"), ("we_chef", ",lambda=0.4,gamma=3"),
    ("we_sd", ",lambda=0.4,gamma=2,bonus=exact"), ("cd_chef", ",tree=8x2"), ("we_sd", ",lambda=0.4,bonus=exact,tree=6x3"),
])
def test_every_method_gives_the_standard_greedy_outputs_and_their_score(task_dir, model_root, method, extra):
    folder, cd_outputs = task_dir
    family = method.split("_")[0]
    expected = cd_outputs if family == "cd" else standard_outputs(model_root, "we", lam=0.4)
    results = evaluate(folder, f"members={PAIR},method={method},dtype=float32,threads=1,kernels=false{extra}")
    got, targets = responses(results)
    assert got == expected
    if "_" in method:  # token for token too: the standard method run beside it on the same requests
        lm = get_model("cos").create_from_arg_string(
            f"members={PAIR},method={method},dtype=float32,threads=1,kernels=false,compare_with=standard{extra}")
        lm.generate_until([Instance("generate_until", {}, (p, {"until": ["Q:"], "max_gen_toks": MAX_GEN_TOKS}), i)
                           for i, p in enumerate(PROMPTS)])
        compared = lm.tally.summary()["compare_with"]
        assert compared["method"] == family and compared["identical"] == compared["greedy_compared"] == len(PROMPTS)
    implied = sum(g == t for g, t in zip(got, targets)) / len(got)
    assert results["results"]["tiny_copy"]["exact_match,none"] == pytest.approx(implied)
    if family == "cd":
        assert implied == pytest.approx(2 / 3)  # the targets were built from cd's outputs


def test_statistics_are_logged_and_compare_with_measures_the_speedup(task_dir, caplog):
    folder, expected = task_dir
    lm = get_model("cos").create_from_arg_string(
        f"members={PAIR},method=cd_chef,gamma=1|4,dtype=float32,threads=1,kernels=false,compare_with=standard")
    with caplog.at_level("INFO", logger="cos.lm_eval"):
        results = lm_eval.simple_evaluate(model=lm, tasks=["tiny_copy"], log_samples=True,
                                          task_manager=TaskManager(include_path=str(folder), include_defaults=False))
    assert responses(results)[0] == expected
    s = lm.tally.summary()
    assert s["prompts"] == len(PROMPTS) and s["drafted"] > 0 and s["acceptance_rate"] is not None
    assert s["compare_with"]["method"] == "cd" and s["compare_with"]["identical"] == len(PROMPTS)
    assert s["measured_speedup"] is not None
    assert results["config"]["cos_statistics"]["drafted"] == s["drafted"]  # in lm-eval's results file too
    assert any("cd_chef: 3 requests" in r.message and "acceptance rate" in r.message and "measured speedup" in r.message
               for r in caplog.records)


def test_the_shipped_gsm8k_task_reads_local_files(model_root, tmp_path):
    """src/cos/lm_eval/tasks/gsm8k_local.yaml: lm-eval's gsm8k with its rows from a local folder (no hub)."""
    rows = [{"question": f"Tom has {i} apples and buys {i + 1} more. How many now?", "answer": f"{i} + {i + 1}\n#### {2 * i + 1}"}
            for i in range(7)]
    for split, chosen in (("train", rows[:5]), ("test", rows[5:])):
        (tmp_path / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in chosen))
    manager = TaskManager(include_path=str(TASKS), include_defaults=False, metadata={"gsm8k_dir": str(tmp_path)})
    results = lm_eval.simple_evaluate(model="cos", model_args=f"members={PAIR},method=cd_chef,dtype=float32,kernels=false",
                                      tasks=["gsm8k_local"], task_manager=manager, gen_kwargs="max_gen_toks=4",
                                      log_samples=True)
    samples = results["samples"]["gsm8k_local"]
    assert {s["doc"]["question"] for s in samples} == {r["question"] for r in rows[5:]}  # one sample per filter
    assert all(s["arguments"][0][0].count("Question:") == 6 for s in samples)  # 5 shots from train.jsonl + the question
    assert "exact_match,strict-match" in results["results"]["gsm8k_local"]


def test_sampled_requests_follow_the_seed(model_root):
    """do_sample: request i draws with seed + i, so a run repeats with its seed and changes with another."""
    requests = [Instance("generate_until", {}, (p, {"until": ["Q:"], "max_gen_toks": MAX_GEN_TOKS, "do_sample": True,
                                                    "temperature": 1.0}), i) for i, p in enumerate(PROMPTS)]
    run = lambda seed: get_model("cos").create_from_arg_string(
        f"members={PAIR},method=cd_chef,gamma=1|4,schedule=fixed,dtype=float32,kernels=false,seed={seed}"
    ).generate_until(requests)
    first = run(3)
    assert run(3) == first and run(4) != first


# ----------------------------------------------------------------- loglikelihood: log r by hand
@functools.cache
def hf_model(folder: Path):
    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()


def hand_r(model_root, method: str, ids: list[int], alpha=0.1, lam=0.5) -> torch.Tensor:
    """r [len(ids), V] at every position from each member's full-sequence logits (fp32, in float64 here)."""
    with torch.no_grad():
        expert, other = [hf_model(model_root / name)(input_ids=torch.tensor([ids])).logits[0].double()
                         for name in PAIR.split("|")]
    if method.startswith("cd"):
        return torch.softmax(expert - alpha * other, -1)
    return (1 - lam) * torch.softmax(expert, -1) + lam * torch.softmax(other, -1)


def hand_log_r(model_root, method: str, ids: list[int], n: int, alpha=0.1, lam=0.5) -> tuple[float, bool]:
    """Σ log r over the last n tokens of ids, and whether each is argmax r."""
    r = hand_r(model_root, method, ids, alpha, lam)[-n - 1:-1]
    targets = torch.tensor(ids[-n:])
    return float(r.log()[torch.arange(n), targets].sum()), bool((r.argmax(-1) == targets).all())


@pytest.mark.parametrize("method, args", [("cd_chef", "alpha=0.3,gamma=1|4"), ("we", "lambda=0.3")])
def test_loglikelihood_is_log_r_of_the_continuation(model_root, method, args):
    lm = get_model("cos").create_from_arg_string(f"members={PAIR},method={method},{args},dtype=float32,kernels=false")
    tok = AutoTokenizer.from_pretrained(model_root / "tiny-expert")
    alpha, lam = (0.3, 0.5) if method.startswith("cd") else (0.1, 0.3)
    # a context whose greedy continuation under r (by hand) is printable text, so it survives decoding and
    # encoding again: that request must report is_greedy
    for i in range(100):
        context = f"Answer {i}:"
        ids = tok(context, add_special_tokens=False)["input_ids"]
        for _ in range(2):
            ids.append(int(hand_r(model_root, method, ids, alpha, lam)[-1].argmax()))
        greedy_text = tok.decode(ids[-2:])
        if greedy_text.isprintable() and tok(context + greedy_text, add_special_tokens=False)["input_ids"] == ids:
            break
    else:
        pytest.fail("no context with a printable greedy continuation")
    pairs = [(context, " forty-two"), (context, " 42"), (context, greedy_text), ("", "hello")]
    requests = [Instance("loglikelihood", {}, pair, i) for i, pair in enumerate(pairs)]
    got = lm.loglikelihood(requests)
    for (ctx, cont), (logp, is_greedy) in zip(pairs, got):
        ctx_ids = tok(ctx, add_special_tokens=False)["input_ids"] or [tok.eos_token_id]
        cont_ids = tok(cont, add_special_tokens=False)["input_ids"]
        want, want_greedy = hand_log_r(model_root, method, ctx_ids + cont_ids, len(cont_ids), alpha=alpha, lam=lam)
        assert logp == pytest.approx(want, abs=1e-3), (ctx, cont)
        assert is_greedy == want_greedy
    assert got[2][1] is True and got[0][1] is False
    # rolling: the whole text scored from the prefix token, one window here
    text = "Rolling text, scored token by token."
    (rolling,) = lm.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (text,), 0)])
    ids = [tok.eos_token_id] + tok(text, add_special_tokens=False)["input_ids"]
    assert rolling == pytest.approx(hand_log_r(model_root, method, ids, len(ids) - 1, alpha=alpha, lam=lam)[0], abs=1e-3)


def test_rolling_windows_cover_every_token_once(model_root):
    """max_length shorter than the text: lm-eval's disjoint windows, each scored with its own context."""
    from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

    lm = get_model("cos").create_from_arg_string(f"members={PAIR},method=we,dtype=float32,kernels=false,max_length=8")
    tok = AutoTokenizer.from_pretrained(model_root / "tiny-expert")
    text = "A text of more than eight bytes."
    (rolling,) = lm.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (text,), 0)])
    windows = [make_disjoint_window(w) for w in get_rolling_token_windows(
        token_list=tok(text, add_special_tokens=False)["input_ids"], prefix_token=tok.eos_token_id, max_seq_len=8,
        context_len=1)]
    assert len(windows) > 3 and sum(len(cont) for _, cont in windows) == len(text)
    want = sum(hand_log_r(model_root, "we", list(ctx) + list(cont), len(cont))[0] for ctx, cont in windows)
    assert rolling == pytest.approx(want, abs=1e-3)


# ----------------------------------------------------------------- refusals, before any model loads
@pytest.mark.parametrize("model_args, message", [
    ("method=cd", "model_args needs members=<model>|<model>"),
    (f"members={PAIR},method=cdd", "method='cdd' is not a method: use one of"),
    (f"members={PAIR},method=cd_chef,gama=3", "unknown model_args key 'gama' (did you mean gamma?)"),
    ("members=tiny-expert|tiny-amateur|tiny-third,method=cd", "method cd takes 2 members [model, amateur_model], got 3"),
    (f"members={PAIR},method=cd_chef,gamma=1|x", "gamma=1|x: each entry of a list must be a int"),
    (f"members={PAIR},method=cd_chef,gamma=1|2|3", "gamma [1, 2, 3] has 3 entries for 2 members"),
    (f"members={PAIR},method=cd,alpha=-1", "contrastive alpha must be >= 0"),
    (f"members={PAIR},method=we,weights=0.3|0.3", "weights must sum to 1"),
    (f"members={PAIR},method=we_mix,temperature=0", "use we_chef (exact for greedy decoding too), or a temperature > 0"),
    (f"members={PAIR},method=cd,lambda=0.3", "would ignore lambda"),
    (f"members={PAIR},method=cd,dtype=float8", "unknown dtype 'float8'"),
    ("members=tiny-expert|no-such-model,method=cd", "members[1]=no-such-model: no model folder"),
    (f"members={PAIR},method=cd,max_gen_toks=0", "max_gen_toks must be an int >= 1"),
])
def test_bad_model_args_are_refused_before_any_model_loads(model_args, message, monkeypatch):
    monkeypatch.setattr(build_module, "load_member", lambda *a, **k: pytest.fail("loaded a model"))
    with pytest.raises((ValueError, FileNotFoundError)) as info:
        get_model("cos").create_from_arg_string(model_args)
    assert message in str(info.value), str(info.value)
    assert str(info.value).startswith("lm_eval --model cos: ") or "members[1]" in str(info.value)


def test_gen_kwargs_the_engine_cannot_honour_are_refused(task_dir):
    lm = get_model("cos").create_from_arg_string(f"members={PAIR},method=cd,dtype=float32,kernels=false")
    request = Instance("generate_until", {}, ("Q: 1 + 1\nA:", {"until": ["Q:"], "repetition_penalty": 1.2}), 0)
    with pytest.raises(ValueError, match="gen_kwargs repetition_penalty cannot be honoured"):
        lm.generate_until([request])


# ----------------------------------------------------------------- the command line
@pytest.mark.slow
def test_lm_eval_command_line_runs_the_local_task(task_dir, model_root, tmp_path):
    folder, expected = task_dir
    env = {**os.environ, "MODEL_PATH": str(model_root), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1", "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [sys.executable, "-m", "cos.lm_eval", "--model", "cos", "--model_args",
           f"members={PAIR},method=cd_chef,gamma=1|4,dtype=float32,kernels=false", "--tasks", "tiny_copy",
           "--include_path", str(folder), "--output_path", str(tmp_path / "out")]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "tiny_copy" in proc.stdout and "exact_match" in proc.stdout
    assert "cd_chef: 3 requests" in proc.stderr and "acceptance rate" in proc.stderr  # the engine's statistics
    result = json.loads(next((tmp_path / "out").rglob("results_*.json")).read_text())
    assert result["results"]["tiny_copy"]["exact_match,none"] == pytest.approx(2 / 3)


# ----------------------------------------------------------------- members over bytes (docs/byte_level.md)
def test_over_bytes_log_r_of_one_token_per_byte_members_is_the_token_level_log_r(model_root):
    """tiny-expert and tiny-amateur spell one token per byte, so each text has one tokenization and r over
    bytes is r over tokens: byte_level=true must score what the token-level hand computation does."""
    lm = get_model("cos").create_from_arg_string(
        f"members={PAIR},method=cd,alpha=0.3,byte_level=true,prune=0,dtype=float32,kernels=false")
    tok = AutoTokenizer.from_pretrained(model_root / "tiny-expert")
    pairs = [("Answer 7:", " forty-two"), ("", "hello")]
    got = lm.loglikelihood([Instance("loglikelihood", {}, pair, i) for i, pair in enumerate(pairs)])
    for (ctx, cont), (logp, _) in zip(pairs, got):
        ctx_ids = tok(ctx, add_special_tokens=False)["input_ids"] or [tok.eos_token_id]
        cont_ids = tok(cont, add_special_tokens=False)["input_ids"]
        assert logp == pytest.approx(hand_log_r(model_root, "cd", ctx_ids + cont_ids, len(cont_ids), alpha=0.3)[0],
                                     abs=1e-3), (ctx, cont)
    text = "Rolling text."
    (rolling,) = lm.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (text,), 0)])
    ids = [tok.eos_token_id] + tok(text, add_special_tokens=False)["input_ids"]
    assert rolling == pytest.approx(hand_log_r(model_root, "cd", ids, len(ids) - 1, alpha=0.3)[0], abs=1e-3)


def test_over_bytes_generate_until_gives_the_standard_greedy_text(model_root):
    """Members with different tokenizers (tiny-merged has merges of its own): cd_chef over bytes through
    lm-eval's interface returns cd's greedy texts."""
    requests = [Instance("generate_until", {}, (p, {"until": ["Q:"], "max_gen_toks": MAX_GEN_TOKS, "do_sample": False}), i)
                for i, p in enumerate(PROMPTS)]
    run = lambda method: get_model("cos").create_from_arg_string(  # noqa: E731
        f"members=tiny-expert|tiny-merged,method={method},dtype=float32,kernels=false,draft_bytes=6"
    ).generate_until(requests)
    standard = run("cd")
    assert run("cd_chef") == standard and all(isinstance(text, str) for text in standard)
