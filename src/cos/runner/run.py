"""The benchmark loop (CONTRIBUTING.md §13): load the selection, skip finished prompts, warm up, generate,
score and record each prompt as it finishes, then summarize.

    summary = run_dataset(cfg, Path("outputs/x"))   # cfg: a composed config as a plain dict
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from tqdm import tqdm

from ..datasets import get_dataset
from ..datasets.base import resolve_size
from .build import Built, build_engines, check_before_loading
from .compare import compare_tokens, difference_message
from .config import RunConfig, run_config
from .greedy_gap import record_gap
from ..machine import LoadMeter
from .results import RESULTS, ResultsWriter, prepare_output, write_summary
from .summary import record_stats, summarize, summary_lines

log = logging.getLogger("cos.runner")


def make_adapter(dataset: Mapping):
    """The dataset adapter, with dataset.options passed through (a wrong option is a one-line error)."""
    if not dataset.get("name"):
        raise ValueError("dataset.name is not set: give dataset.name=<humaneval, gsm8k, mmlu, cnndm or jsonl>")
    options = dict(dataset.get("options") or {})
    try:
        return get_dataset(dataset["name"], use_fewshot=dataset["use_fewshot"], **options)
    except TypeError as e:
        raise ValueError(f"dataset {dataset['name']} does not take dataset.options {sorted(options)}: {e}") from None


def load_examples(adapter, dataset: Mapping, seed: int) -> list:
    """The selected examples (seeded shuffle, then the first `size`); hub problems become one-line errors."""
    size = dataset.get("size", "tiny")
    try:
        resolve_size(size, 1)
    except ValueError as e:
        raise ValueError(f"dataset.{e}") from None
    try:
        examples = adapter.load(path=dataset.get("path"), size=size, seed=seed)
    except RuntimeError as e:  # hub unreachable, optional package missing: the adapter says what to do
        raise ValueError(str(e)) from None
    if not examples:
        raise ValueError(f"dataset {dataset['name']} selected no prompts: check dataset.path and dataset.size")
    return examples


def generation_options(run: RunConfig, default_max: int, stop, seed: int) -> dict:
    g = run.generate
    return {"max_new_tokens": g.max_tokens or default_max, "temperature": float(g.temperature),
            "top_k": g.top_k, "top_p": float(g.top_p), "seed": seed, "stop": list(stop)}


def warm_up(built: Built, ids: list[int], options: dict, times: int) -> None:
    """Untimed generations so one-off costs (allocation, kernel selection, caches) miss prompt 1."""
    short = {**options, "max_new_tokens": min(8, options["max_new_tokens"])}
    for engine in [e for e in (built.baseline, built.engine) if e is not None]:
        seconds = engine.warm_up()  # compiled members: every forward length, captured here
        if seconds:
            log.info("%s: compiled / captured forwards in %.1f s (warm-up, not timed)", engine.plan.method, seconds)
        for _ in range(times):
            engine.generate(ids, **short)


def timed(engine, ids: list[int], options: dict):
    start = time.perf_counter()
    out = engine.generate(ids, **options)
    return out, time.perf_counter() - start


def generate_pair(built: Built, ids: list[int], options: dict) -> dict:
    """The baseline (if any) then the method on one prompt, back to back, same options: the record's
    output and statistics, the baseline's under "baseline", and the greedy identity check."""
    record: dict = {}
    baseline = None
    if built.baseline is not None:
        baseline, seconds = timed(built.baseline, ids, options)
        record["baseline"] = {"method": built.baseline.plan.method, "output": baseline.text,
                              **record_stats(baseline, seconds)}
    out, seconds = timed(built.engine, ids, options)
    record.update({"output": out.text, **record_stats(out, seconds)})
    if baseline is not None:
        record.update(compare_tokens(out.tokens, baseline.tokens, greedy=options["temperature"] == 0))
        if record["identical"] is False:  # after both timings: a fresh forward says how near a tie it was
            record["log_r_gap"] = record_gap(built.baseline, ids, record)
    return record


def run_prompt(built: Built, run: RunConfig, adapter, example, index: int, ids: list[int], options: dict) -> dict:
    """One prompt: baseline (if any) then the method, back to back; scored; one record."""
    record = {"id": example.id, "index": index, "backend": run.backend, "prompt": example.prompt,
              "prompt_tokens": built.prompt_tokens(ids), **generate_pair(built, ids, options)}
    record["score"] = adapter.score(example, record["output"])
    base = record.get("baseline")
    if base is not None:
        base["score"] = record["score"] if base["output"] == record["output"] else adapter.score(example, base["output"])
    return record


def progress_postfix(records: list[dict]) -> dict:
    """Running tokens/s (total tokens / total decode time) and acceptance rate, for the progress bar."""
    tokens, seconds = sum(r["tokens"] for r in records), sum(r["time"] for r in records)
    drafted, accepted = sum(r["drafted"] for r in records), sum(r["accepted"] for r in records)
    return {"tok/s": f"{tokens / seconds if seconds else 0:.1f}", "acc": f"{accepted / drafted:.2f}" if drafted else "-"}


def run_dataset(cfg: Mapping, out_dir: Path, on_record: Callable[[dict], None] | None = None,
                model_path: str | None = None, loaded: dict | None = None) -> dict:
    """Run (or resume) a benchmark into out_dir; returns the summary (also in out_dir/summary.json).
    loaded: models already loaded in this process, reused and added to (build_engines)."""
    # 1. check everything that needs no model: config, dataset selection, the output folder
    run = run_config(cfg)
    paths = check_before_loading(run, model_path)
    adapter = make_adapter(run.dataset)
    examples = load_examples(adapter, run.dataset, run.seed)
    records = prepare_output(out_dir, {**cfg, "data_sha256": adapter.data_sha256})
    done = {r["id"] for r in records}
    todo = [(i, ex) for i, ex in enumerate(examples) if ex.id not in done]
    log.info("%s on %s: %d prompts, %d already done; results in %s (resume: save_path=%s)", run.method.method,
             run.dataset["name"], len(examples), len(examples) - len(todo), out_dir / RESULTS, out_dir)
    # 2. generate what is left, one record flushed per prompt (and how busy the machine was meanwhile)
    meter = LoadMeter()
    if todo:
        built = build_engines(run, paths=paths, loaded=loaded)
        try:
            chat, cut = run.dataset["chat_template"], run.max_prompt_len
            encoded = lambda ex: built.encode(ex.prompt, chat, cut)  # noqa: E731
            opts = lambda i: generation_options(run, adapter.max_new_tokens, adapter.stop_strings, run.seed + i)
            if run.warmup:
                warm_up(built, encoded(todo[0][1]), opts(0), run.warmup)
            bar = tqdm(total=len(examples), initial=len(examples) - len(todo), unit="prompt",
                       desc=run.method.method, disable=not run.progress, dynamic_ncols=True)
            with ResultsWriter(out_dir / RESULTS) as writer, bar:
                for i, example in todo:
                    record = run_prompt(built, run, adapter, example, i, encoded(example), opts(i))
                    writer.append(record)
                    records.append(record)
                    if record.get("identical") is False:
                        log.warning(difference_message(record))
                    bar.set_postfix(progress_postfix(records))
                    bar.update(1)
                    if on_record is not None:
                        on_record(record)
        finally:
            built.close()  # vLLM engines free their KV cache now, not at garbage collection
    load = meter.stop()
    # 3. summary over the selected prompts
    selected = {ex.id for ex in examples}
    mine = [r for r in records if r["id"] in selected]
    summary = summarize(mine, method=run.method.method, quality=adapter.aggregate([r["score"] for r in mine]),
                        selected=len(examples),
                        info={"dataset": run.dataset["name"], "size": run.dataset.get("size"), "backend": run.backend,
                              "models": run.method.members, "model_paths": paths,
                              "temperature": float(run.generate.temperature),
                              "output_dir": str(out_dir), "load": load.as_dict() if todo else None})
    if summary.get("compare_with"):
        summary["compare_with"]["quality"] = adapter.aggregate([r["baseline"]["score"] for r in mine])
    write_summary(out_dir, summary)
    for line in summary_lines(summary):
        print(line)
    return summary
