"""The dataset-adapter interface: rows in, prompts out, generations scored.

Every benchmark is a small adapter (one file each) that knows three things about its data: how to turn
a row into the exact prompt the paper's reference code used, how to pull an answer out of generated
text, and how to score it. The runner never looks inside rows; it only sees `Example`s, the adapter's
`stop_strings` / `max_new_tokens`, and the per-prompt score dicts. All adapters here are *generative*
(the model writes text that is then parsed), none uses log-likelihood scoring of answer options.
"""

from __future__ import annotations

import hashlib
import json
import random
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar

# Named sizes, so that "tiny" means the same few prompts in smoke tests, CI and papers' appendices.
SIZES: dict[str, int | None] = {"tiny": 5, "small": 200, "full": None}

# The paper's prompt templates ship inside this package (cos/datasets/prompts/*.txt; sources in its README).
PROMPTS_PACKAGE = "cos.datasets"
PROMPTS_FOLDER = "prompts"


@dataclass
class Example:
    """One prompt to generate from, plus what its generation is scored against."""

    id: str
    prompt: str
    reference: Any
    meta: dict = field(default_factory=dict)


def resolve_size(size: str | int, n_rows: int) -> int:
    """Number of rows a size selects: "tiny"=5, "small"=200, "full"=all, or a positive int (capped)."""
    allowed = 'size must be "tiny" (5), "small" (200), "full" (all) or a positive integer'
    if isinstance(size, str) and size.strip().isdigit():
        size = int(size.strip())  # "50" from a command line means 50
    if isinstance(size, bool):  # bool is an int subclass; True is not a size
        raise ValueError(f"{allowed}; got {size!r}")
    if isinstance(size, str):
        if size not in SIZES:
            raise ValueError(f"{allowed}; got {size!r}")
        wanted = SIZES[size]
        return n_rows if wanted is None else min(wanted, n_rows)
    if isinstance(size, int) and size > 0:
        return min(size, n_rows)
    raise ValueError(f"{allowed}; got {size!r}")


def select_rows(rows: list[dict], size: str | int, seed: int) -> list[tuple[int, dict]]:
    """Seeded shuffle, then the first N, as (original index, row) pairs.

    Always shuffling (also for "full") makes smaller selections prefixes of larger ones for the same
    seed: tiny ⊂ small ⊂ full, so a quick run is a subset of the full run.
    """
    n = resolve_size(size, len(rows))
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    return [(i, rows[i]) for i in order[:n]]


def rows_digest(rows: list[dict]) -> str:
    """SHA-256 of every row (before selection), as canonical JSON: the data's identity for resuming."""
    text = json.dumps(rows, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def read_jsonl(path: str | Path, split: str = "test", required: tuple[str, ...] = ()) -> list[dict]:
    """Rows of a jsonl file, or of `<folder>/<split>.jsonl` when `path` is a folder. A line that is not
    a JSON object, or lacks a `required` field, is an error naming the file and the line."""
    p = Path(path).expanduser()
    if p.is_dir():
        p = p / f"{split}.jsonl"
    if not p.is_file():
        raise FileNotFoundError(f"no jsonl data at {p} (pass a .jsonl file or a folder holding {split}.jsonl)")
    rows = []
    with p.open(encoding="utf-8") as f:
        try:
            lines = list(f)
        except UnicodeDecodeError as e:
            raise ValueError(f"{p} is not UTF-8 text ({e.reason} at byte {e.start})") from None
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{p}, line {n}: not valid JSON ({e.msg}, column {e.colno}): fix or remove the "
                             f"line") from None
        if not isinstance(row, dict):
            raise ValueError(f"{p}, line {n}: expected a JSON object {{...}}, got {type(row).__name__}")
        missing = [field for field in required if field not in row]
        if missing:
            raise ValueError(f"{p}, line {n}: no field {', '.join(map(repr, missing))} (each line needs "
                             f"{', '.join(required)})")
        rows.append(row)
    return rows


def read_hub(name: str, config: str | None, split: str) -> list[dict]:
    """Rows from the Hugging Face hub through `datasets` (cached by it in ~/.cache/huggingface/datasets);
    `datasets` is imported here so it stays an optional dependency. Every failure (package missing,
    offline, blocked, gated, renamed) is one RuntimeError that names `dataset.path`, the local fix."""
    local = "or give local data with dataset.path=<a .jsonl file, or a folder holding test.jsonl>"
    try:
        from datasets import load_dataset  # noqa: PLC0415 (lazy on purpose)
    except ImportError as e:
        raise RuntimeError(
            f"loading {name!r} from the Hugging Face hub needs the `datasets` package (pip install datasets), {local}"
        ) from e
    try:
        ds = load_dataset(name, config, split=split)
    except Exception as e:  # offline, blocked, gated, renamed: all end here with the same advice
        reason = " ".join(str(e).split()) or type(e).__name__
        raise RuntimeError(
            f"could not load {name!r} (config {config!r}, split {split!r}) from the Hugging Face hub "
            f"({reason}); if the hub is unreachable or offline, {local}"
        ) from e
    return [dict(r) for r in ds]


def truncate_at_stop(text: str, stop_strings: list[str]) -> str:
    """Text up to the earliest stop string: generation may run past a stop when the engine ignores it."""
    cut = len(text)
    for s in stop_strings:
        i = text.find(s)
        if i != -1:
            cut = min(cut, i)
    return text[:cut]


def read_template(prompts_dir: str | Path | None, name: str) -> str:
    """The text of template `<name>.txt`: from `prompts_dir` when given, else the one shipped in the package."""
    if prompts_dir is None:
        shipped = resources.files(PROMPTS_PACKAGE).joinpath(PROMPTS_FOLDER).joinpath(f"{name}.txt")
        if not shipped.is_file():
            raise FileNotFoundError(f"no packaged prompt template {name}.txt (cos/datasets/{PROMPTS_FOLDER}/): "
                                    f"reinstall the package, or pass prompts_dir=<folder with {name}.txt>")
        return shipped.read_text(encoding="utf-8")
    path = Path(prompts_dir).expanduser() / f"{name}.txt"
    if not path.is_file():
        raise FileNotFoundError(f"prompt template {path} not found; pass prompts_dir=<folder with {name}.txt>, "
                                f"or leave prompts_dir unset for the templates shipped with cos")
    return path.read_text(encoding="utf-8")


def render_template(prompts_dir: str | Path | None, name: str, **variables: Any) -> str:
    """Render one of the paper's Jinja prompt templates (`<name>.txt`, see read_template) verbatim.

    `keep_trailing_newline` keeps the file's final newline (gsm8k_fewshot.txt ends "step by step.\\n",
    like its own examples); StrictUndefined turns a misspelt variable into an error, not an empty slot.
    """
    import jinja2  # noqa: PLC0415 (only adapters that use templates need it)

    template = jinja2.Template(
        read_template(prompts_dir, name), keep_trailing_newline=True, undefined=jinja2.StrictUndefined
    )
    return template.render(**variables)


def _at(path: str | None) -> str:
    return f" ({path})" if path is not None else ""


class DatasetAdapter(ABC):
    """Load rows, build prompts, extract answers, score. Subclasses set the class attributes.

    Options common to all adapters: `use_fewshot` (few-shot vs zero-shot template) and `prompts_dir`
    (folder of the Jinja templates; default: those shipped in cos/datasets/prompts/), and overrides
    of the class defaults `stop_strings` / `max_new_tokens` that the runner passes to generation.
    """

    name: ClassVar[str]
    hub_name: ClassVar[str | None] = None  # used when load() gets no path
    hub_config: ClassVar[str | None] = None
    split: ClassVar[str] = "test"
    scoring: ClassVar[str] = "generative"  # text is generated then parsed; no log-likelihood scoring
    stop_strings: list[str] = []  # class default; instances hold a copy
    max_new_tokens: int = 256
    data_sha256: str | None = None  # set by load(): rows_digest of every row read
    required_fields: tuple[str, ...] = ()  # fields every row must have (checked with file and line)

    def __init__(
        self,
        use_fewshot: bool = True,
        prompts_dir: str | None = None,
        stop_strings: list[str] | None = None,
        max_new_tokens: int | None = None,
    ) -> None:
        self.use_fewshot = use_fewshot
        self.prompts_dir = prompts_dir
        # Per-instance copies: a runner that edits its adapter's stops must not edit the class default.
        self.stop_strings = list(type(self).stop_strings if stop_strings is None else stop_strings)
        self.max_new_tokens = type(self).max_new_tokens if max_new_tokens is None else max_new_tokens

    # --- loading -----------------------------------------------------------------------------------
    def read_rows(self, path: str | None) -> list[dict]:
        """All rows, from `path` (a jsonl file or a folder holding <split>.jsonl) when given, else from the hub."""
        if path is not None:
            return read_jsonl(path, self.split, self.required_fields)
        if self.hub_name is None:
            raise ValueError(f"dataset {self.name!r} needs dataset.path=<a jsonl file or a folder holding "
                             f"{self.split}.jsonl>")
        return read_hub(self.hub_name, self.hub_config, self.split)

    def load(self, path: str | None = None, size: str | int = "full", seed: int = 0) -> list[Example]:
        """The selected rows as Examples (prompts built with this adapter's `use_fewshot`)."""
        resolve_size(size, 1)  # reject a bad size before any slow read
        rows = self.read_rows(path)
        self.data_sha256 = rows_digest(rows)
        examples = []
        for i, row in select_rows(rows, size, seed):
            try:
                example = self.to_example(row, i)
            except KeyError as e:
                raise ValueError(f"dataset {self.name}{_at(path)}: row {i + 1} has no field {e}") from None
            if not example.prompt:
                raise ValueError(f"dataset {self.name}{_at(path)}: row {i + 1} ({example.id}) has an empty "
                                 f"prompt: give it text or remove it")
            examples.append(example)
        return examples

    @abstractmethod
    def to_example(self, row: dict, index: int) -> Example:
        """One row (at `index` in its file) as an Example."""

    # --- prompting and scoring ---------------------------------------------------------------------
    @abstractmethod
    def build_prompt(self, row: dict, use_fewshot: bool) -> str:
        """The exact text the model continues."""

    @abstractmethod
    def extract_answer(self, text: str) -> Any:
        """The answer in a generation (None when there is none)."""

    @abstractmethod
    def score(self, example: Example, output_text: str) -> dict[str, float]:
        """Per-prompt metric values for one generation."""

    def aggregate(self, scores: list[dict[str, float]]) -> dict[str, float]:
        """Dataset-level metrics: the mean of each per-prompt metric."""
        keys = sorted({k for s in scores for k in s})
        return {k: sum(s[k] for s in scores if k in s) / sum(1 for s in scores if k in s) for k in keys}
