"""Your own data: any jsonl file, one prompt per line, with an optional reference and metric.

This is the documented way to add a dataset without writing an adapter:

    get_dataset("jsonl", path="my.jsonl", prompt_field="prompt", reference_field="answer",
                metric="exact_match")

Each line is a JSON object; `prompt_field` is used verbatim as the prompt. Metrics (per prompt, then
averaged): "exact_match" (stripped generation == stripped reference), "contains" (reference appears
in the generation, case- and whitespace-insensitive), "rouge" (ROUGE-1/2/L F1), or None (generate only:
no scores). A list-valued reference counts as correct if any item matches (best item for ROUGE).
"""

from __future__ import annotations

from typing import Any

from cos.datasets.base import DatasetAdapter, Example, truncate_at_stop

METRICS = ("exact_match", "contains", "rouge", None)


def _normalise(text: str) -> str:
    return " ".join(str(text).split()).lower()


class JsonlDataset(DatasetAdapter):
    """A jsonl file as a dataset; no hub, no templates (`use_fewshot` is ignored)."""

    name = "jsonl"
    stop_strings: list[str] = []
    max_new_tokens = 256

    def __init__(
        self,
        path: str | None = None,
        prompt_field: str = "prompt",
        reference_field: str | None = None,
        metric: str | None = None,
        id_field: str = "id",
        **options: Any,
    ) -> None:
        super().__init__(**options)
        if metric not in METRICS:
            raise ValueError(f"metric must be one of {METRICS}; got {metric!r}")
        if metric is not None and reference_field is None:
            raise ValueError(f"metric {metric!r} needs a reference_field")
        self.path, self.prompt_field, self.reference_field = path, prompt_field, reference_field
        self.metric, self.id_field = metric, id_field
        self.required_fields = (prompt_field,)
        self._rouge = None

    def read_rows(self, path: str | None) -> list[dict]:
        path = path if path is not None else self.path
        if path is None:
            raise ValueError("the jsonl dataset needs path=<file.jsonl>")
        return super().read_rows(path)  # checks prompt_field on every line

    def build_prompt(self, row: dict, use_fewshot: bool) -> str:
        return str(row[self.prompt_field])

    def to_example(self, row: dict, index: int) -> Example:
        return Example(
            id=str(row.get(self.id_field, f"jsonl/{index}")),
            prompt=self.build_prompt(row, self.use_fewshot),
            reference=row.get(self.reference_field) if self.reference_field else None,
            meta={k: v for k, v in row.items() if k not in (self.prompt_field, self.reference_field)},
        )

    def extract_answer(self, text: str) -> str:
        return truncate_at_stop(text, self.stop_strings).strip()

    def score(self, example: Example, output_text: str) -> dict[str, float]:
        if self.metric is None:
            return {}
        answer = self.extract_answer(output_text)
        refs = example.reference if isinstance(example.reference, list) else [example.reference]
        refs = [str(r) for r in refs]
        if self.metric == "exact_match":
            return {"exact_match": float(any(answer == r.strip() for r in refs))}
        if self.metric == "contains":
            return {"contains": float(any(_normalise(r) in _normalise(answer) for r in refs))}
        if self._rouge is None:
            from cos.datasets.cnndm import RougeF1  # noqa: PLC0415 (rouge_score only when asked for)

            self._rouge = RougeF1()
        per_ref = [self._rouge(r, answer) for r in refs]
        return {k: max(s[k] for s in per_ref) for k in per_ref[0]}
