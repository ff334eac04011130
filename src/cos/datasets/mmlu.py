"""MMLU (57 subjects, 4 choices, generative chain of thought): the model reasons, then names a letter.

Few-shot prompts are the per-subject chain-of-thought prefixes of mmlu_cot_prompts.json (five worked
examples each, ending "The answer is X."), a blank line, then mmlu_fewshot.txt for the question.
Zero-shot prompts are mmlu_zeroshot.txt alone. Choices are written as in those prefixes:
"(A) text \\n(B) text \\n(C) text \\n(D) text" (each line but the last ends in a space).
"""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path

from cos.datasets.base import DatasetAdapter, Example, render_template, truncate_at_stop

# The per-subject prefixes ship inside this package (sources: cos/datasets/prompts/README.md).
COT_PROMPTS_FILE = "mmlu_cot_prompts.json"

LETTERS = "ABCD"

# In order of trust. The few-shot answers end "The answer is C."; "(C)" is how choices are named;
# a bare letter counts only when punctuation or the end of the text follows it, so the English article
# in "A good choice is ..." is never read as choice A.
_ANSWER_IS = re.compile(r"[Aa]nswer\s*(?:is|:)\s*:?\s*\(?([ABCD])\b")
_PARENS = re.compile(r"\(([ABCD])\)")
_BARE = re.compile(r"\b([ABCD])(?=\)|\.(?!\w)|\s*$)")


def format_choices(choices: list[str]) -> str:
    """Choices in the cot prefixes' own layout (see the module docstring)."""
    return " \n".join(f"({letter}) {text}" for letter, text in zip(LETTERS, choices))


def extract_letter(text: str) -> str | None:
    """The chosen letter A-D, or None. The last match of the most trusted pattern wins."""
    for pattern in (_ANSWER_IS, _PARENS, _BARE):
        found = pattern.findall(text)
        if found:
            return found[-1]
    return None


class MMLU(DatasetAdapter):
    """cais/mmlu "all", test split (14,042 rows): question, subject, choices[4], answer (0-3).

    `cot_prompts_path`: the per-subject few-shot prefixes (needed for few-shot only); by default
    `cot_prompts.json` beside the loaded jsonl, else the copy shipped in the package (mmlu_cot_prompts.json).
    """

    name = "mmlu"
    required_fields = ("question", "choices", "answer", "subject")
    hub_name = "cais/mmlu"
    hub_config = "all"
    stop_strings = ["\n\nQ:", "\nQ:", "\n\nQuestion:"]
    max_new_tokens = 256

    def __init__(self, cot_prompts_path: str | None = None, **options) -> None:
        super().__init__(**options)
        self.cot_prompts_path = cot_prompts_path
        self._cot_prompts: dict[str, str] | None = None

    def read_rows(self, path: str | None) -> list[dict]:
        if path is not None and self.cot_prompts_path is None:
            folder = Path(path).expanduser()
            folder = folder if folder.is_dir() else folder.parent
            if (folder / "cot_prompts.json").is_file():
                self.cot_prompts_path = str(folder / "cot_prompts.json")
        return super().read_rows(path)

    def cot_prompt(self, subject: str) -> str:
        """The few-shot prefix for one subject (file read once)."""
        if self._cot_prompts is None:
            if self.cot_prompts_path is None:
                text = resources.files("cos.datasets").joinpath(COT_PROMPTS_FILE).read_text(encoding="utf-8")
            else:
                path = Path(self.cot_prompts_path).expanduser()
                if not path.is_file():
                    raise FileNotFoundError(f"MMLU few-shot needs cot_prompts.json; not found at {path} (leave "
                                            f"cot_prompts_path unset for the prefixes shipped with cos)")
                text = path.read_text(encoding="utf-8")
            self._cot_prompts = json.loads(text)
        if subject not in self._cot_prompts:
            raise ValueError(f"no chain-of-thought prompt for MMLU subject {subject!r}")
        return self._cot_prompts[subject]

    def build_prompt(self, row: dict, use_fewshot: bool) -> str:
        choices = format_choices(list(row["choices"]))
        if not use_fewshot:
            return render_template(self.prompts_dir, "mmlu_zeroshot", question=row["question"], choices_str=choices)
        question = render_template(self.prompts_dir, "mmlu_fewshot", question=row["question"], choices_str=choices)
        return self.cot_prompt(row["subject"]) + "\n\n" + question

    def to_example(self, row: dict, index: int) -> Example:
        return Example(
            id=f"mmlu/{row['subject']}/{index}",
            prompt=self.build_prompt(row, self.use_fewshot),
            reference=LETTERS[int(row["answer"])],
            meta={"subject": row["subject"], "question": row["question"], "choices": list(row["choices"])},
        )

    def extract_answer(self, text: str) -> str | None:
        return extract_letter(truncate_at_stop(text, self.stop_strings))

    def score(self, example: Example, output_text: str) -> dict[str, float]:
        return {"accuracy": float(self.extract_answer(output_text) == example.reference)}
