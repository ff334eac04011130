"""GSM8K (grade-school math, generative): chain-of-thought prompt, the final number is the answer.

Prompts are the paper's templates (gsm8k_fewshot.txt: four worked examples ending in "#### N";
gsm8k_zeroshot.txt), with the row's question in `{{question}}`. Accuracy compares numbers, so
"$1,234." and "1234" are the same answer.
"""

from __future__ import annotations

import re

from cos.datasets.base import DatasetAdapter, Example, render_template, truncate_at_stop

# A number as written in answers: optional minus (not a hyphen inside "5-3"), optional "$", thousands
# groups ("1,234") or plain digits, optional decimals. A sentence's full stop is not a decimal point
# because digits must follow it.
_NUMBER = re.compile(r"(?:(?<![\w.])-)?(?:\$\s?-?)?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|(?<!\d)\.\d+")
_ANSWER_IS = re.compile(r"the answer is", re.IGNORECASE)


def parse_number(text: str) -> float | None:
    """The first number in `text` as a float, ignoring "$" and thousands commas."""
    m = _NUMBER.search(text)
    if m is None:
        return None
    return _to_float(m.group(0))


def _to_float(token: str) -> float:
    """ "-$1,234.5" -> -1234.5; a minus on either side of "$" counts once."""
    negative = "-" in token
    digits = token.replace("$", "").replace(",", "").replace("-", "").strip()
    value = float(digits)
    return -value if negative else value


def extract_number(text: str) -> float | None:
    """The model's final answer: after "####", else after the last "The answer is", else the last number.

    Explicit markers win because the reasoning before them is full of intermediate numbers; without a
    marker the last number is the usual convention (lm-eval-harness "flexible-extract").
    """
    if "####" in text:
        return parse_number(text.split("####", 1)[1])
    marks = list(_ANSWER_IS.finditer(text))
    if marks:
        found = parse_number(text[marks[-1].end():])
        if found is not None:
            return found
    numbers = _NUMBER.findall(text)
    return _to_float(numbers[-1]) if numbers else None


def numbers_equal(a: float | None, b: float | None) -> bool:
    """Equal as numbers, with a tolerance for float round-off ("0.1 + 0.2")."""
    if a is None or b is None:
        return False
    return abs(a - b) <= 1e-6 * max(1.0, abs(b))


class GSM8K(DatasetAdapter):
    """openai/gsm8k "main", test split (1319 rows): fields question, answer ("... #### N")."""

    name = "gsm8k"
    required_fields = ("question", "answer")
    hub_name = "openai/gsm8k"
    hub_config = "main"
    # The few-shot prompt separates examples by a blank line before "Question:"; a model that goes on
    # to invent the next question has finished its answer.
    stop_strings = ["\n\nQuestion:", "Question:"]
    max_new_tokens = 256

    def build_prompt(self, row: dict, use_fewshot: bool) -> str:
        template = "gsm8k_fewshot" if use_fewshot else "gsm8k_zeroshot"
        return render_template(self.prompts_dir, template, question=row["question"])

    def to_example(self, row: dict, index: int) -> Example:
        reference = parse_number(row["answer"].split("####")[-1])
        return Example(
            id=f"gsm8k/{index}",
            prompt=self.build_prompt(row, self.use_fewshot),
            reference=reference,
            meta={"question": row["question"], "solution": row["answer"]},
        )

    def extract_answer(self, text: str) -> float | None:
        return extract_number(truncate_at_stop(text, self.stop_strings))

    def score(self, example: Example, output_text: str) -> dict[str, float]:
        return {"accuracy": float(numbers_equal(self.extract_answer(output_text), example.reference))}
