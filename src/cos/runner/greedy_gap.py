"""How far a greedy difference is from a floating-point tie.

Under greedy decoding an accelerated method must give its standard counterpart's tokens; where they
differ, the question is whether r had a near-tie there (the block forward of a draft and the one-token
forward of standard decoding round differently, most in bfloat16) or an engine bug. The gap answers it:
log r(standard's token) - log r(the method's token) at the first differing position, under the standard
method's r from a fresh forward of every member over the whole prefix (no KV cache), in the members'
dtype. A gap near 0 is a tie; a gap of whole nats is a bug.

The runner records it per prompt (`log_r_gap`, beside `first_difference`); `fill_gaps` adds it to a
run folder written before it was recorded (reproduce.py does so for a grid's cells).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..sampling import SamplingParams
from .results import CONFIG, RESULTS, SUMMARY, read_config, read_records, write_atomically, write_summary


@torch.inference_mode()
def log_r_gap(engine, prompt_ids: list[int], tokens: list[int], i: int, ours: int, theirs: int) -> float:
    """log r(theirs) - log r(ours) at position i of `tokens`, under `engine`'s (the standard method's) r."""
    logits = []
    for member in engine.members:
        seq = torch.tensor([prompt_ids + tokens[:i]], device=member.model.device)
        logits.append(member.model(input_ids=seq).logits[0, -1:].float())
    log_r = engine.plan.combination.distribution(logits, SamplingParams(1.0))[0].log()
    return float(log_r[theirs] - log_r[ours])


def record_gap(engine, prompt_ids: list[int], record: dict) -> float | None:
    """The gap at a record's first greedy difference; None where one output ends there (no token to
    compare) or the standard engine is not a HF engine (backend=vllm) or runs over bytes (no token logits)."""
    i, ours, theirs = record["first_difference"], record["token_ids"], record["baseline"]["token_ids"]
    if i >= min(len(ours), len(theirs)) or not hasattr(engine, "members") or getattr(engine, "byte_level", False):
        return None
    return round(log_r_gap(engine, prompt_ids, theirs, i, ours[i], theirs[i]), 5)


def missing(records: list[dict]) -> list[dict]:
    return [r for r in records if r.get("identical") is False and "log_r_gap" not in r]


def fill_gaps(out_dir: Path, loaded: dict | None = None) -> int:
    """Add `log_r_gap` to every greedy difference of a finished run folder that lacks it (results.jsonl
    and the summary's differences, both rewritten atomically). Loads the members only when one lacks
    it; returns how many gaps were added."""
    from .build import build_engines, check_before_loading  # the runner's loader, imported when needed
    from .config import run_config
    from ..tokens import encode_text as encode

    records = read_records(out_dir / RESULTS)
    todo = missing(records)
    if not todo:
        return 0
    saved = read_config(out_dir / CONFIG)
    run = run_config({k: v for k, v in saved.items() if k != "data_sha256"})  # the data's hash, added by the runner
    built = build_engines(run, paths=check_before_loading(run), loaded=loaded)
    try:
        for record in todo:
            ids = encode(built.tokenizer, record["prompt"], run.dataset["chat_template"], run.max_prompt_len)
            if len(ids) != record["prompt_tokens"]:
                raise ValueError(f"{out_dir}: prompt {record['id']} encodes to {len(ids)} tokens, the run had "
                                 f"{record['prompt_tokens']}: the tokenizer or template changed since")
            record["log_r_gap"] = record_gap(built.baseline, ids, record)
    finally:
        built.close()
    write_atomically(out_dir / RESULTS, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    summary_path = out_dir / SUMMARY
    if summary_path.is_file():
        summary = json.loads(summary_path.read_text(encoding="utf-8"))
        gaps = {r["id"]: r.get("log_r_gap") for r in records if r.get("identical") is False}
        for difference in (summary.get("compare_with") or {}).get("differences", []):
            difference["log_r_gap"] = gaps.get(difference["id"])
        write_summary(out_dir, summary)
    return len(todo)
