"""CNN/DailyMail 3.0.0 (news summarisation, generative): write the highlights, scored by ROUGE.

Prompts are the paper's templates (cnndm_fewshot.txt: one article with its highlights;
cnndm_zeroshot.txt) with the article in `{{article}}`. Articles longer than `max_article_words`
(default 1000) are cut to their first that-many whitespace-separated words, re-joined by single spaces,
so prompts fit small context windows; shorter articles are used verbatim. Metrics: ROUGE-1/2/L F1
(`rouge_score`, Porter stemming) of the generated summary against the reference highlights.
"""

from __future__ import annotations

from functools import cached_property

from cos.datasets.base import DatasetAdapter, Example, render_template, truncate_at_stop

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL")


def truncate_words(text: str, max_words: int | None) -> str:
    """The first `max_words` words of `text` (unchanged when it is shorter, or max_words is None)."""
    if max_words is None:
        return text
    words = text.split()
    return text if len(words) <= max_words else " ".join(words[:max_words])


class RougeF1:
    """ROUGE F1 scores, one scorer built once (building it loads the stemmer)."""

    def __init__(self, types: tuple[str, ...] = ROUGE_TYPES) -> None:
        from rouge_score import rouge_scorer  # noqa: PLC0415 (optional dependency)

        self._scorer = rouge_scorer.RougeScorer(list(types), use_stemmer=True)

    def __call__(self, reference: str, prediction: str) -> dict[str, float]:
        return {name: s.fmeasure for name, s in self._scorer.score(reference, prediction).items()}


class CNNDM(DatasetAdapter):
    """abisee/cnn_dailymail "3.0.0", test split (11,490 rows): id, article, highlights.

    Not stored offline here: it loads from the hub, or from a local jsonl with the same fields.
    """

    name = "cnndm"
    required_fields = ("article", "highlights")
    hub_name = "abisee/cnn_dailymail"
    hub_config = "3.0.0"
    # The few-shot highlights are one line; a blank line or a new "Article:" means the summary is done.
    stop_strings = ["\n\n", "\nArticle:"]
    max_new_tokens = 128

    def __init__(self, max_article_words: int | None = 1000, **options) -> None:
        super().__init__(**options)
        self.max_article_words = max_article_words

    @cached_property
    def rouge(self) -> RougeF1:
        return RougeF1()

    def build_prompt(self, row: dict, use_fewshot: bool) -> str:
        template = "cnndm_fewshot" if use_fewshot else "cnndm_zeroshot"
        article = truncate_words(row["article"], self.max_article_words)
        return render_template(self.prompts_dir, template, article=article)

    def to_example(self, row: dict, index: int) -> Example:
        return Example(
            id=str(row.get("id", f"cnndm/{index}")),
            prompt=self.build_prompt(row, self.use_fewshot),
            reference=row["highlights"],
            meta={"index": index},
        )

    def extract_answer(self, text: str) -> str:
        """The summary: the generation up to the first stop string, stripped."""
        return truncate_at_stop(text, self.stop_strings).strip()

    def score(self, example: Example, output_text: str) -> dict[str, float]:
        return self.rouge(example.reference, self.extract_answer(output_text))
