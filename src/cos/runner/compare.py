"""Side by side in one process: the method and a baseline (compare_with) on the same prompts.

Each prompt runs on the baseline, then on the method, back to back with the same members, tokenizer,
sampling options and seed, so the speedup is a ratio measured in one run with one way of counting.
Under greedy decoding every collaborative method must reproduce its standard counterpart token for
token (docs/algorithm.md §4): any prompt where the outputs differ is reported with the first position
at which the token ids differ and how near a float tie r was there (greedy_gap.py).
"""

from __future__ import annotations

from collections.abc import Sequence


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first index where two token sequences differ (the shorter length if one is a prefix); None if equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def compare_tokens(main: Sequence[int], baseline: Sequence[int], greedy: bool) -> dict:
    """Per-prompt comparison fields. Sampled outputs are not expected to be equal: not compared."""
    if not greedy:
        return {"identical": None, "first_difference": None}
    position = first_difference(main, baseline)
    return {"identical": position is None, "first_difference": position}


def difference_message(record: dict) -> str:
    """One line for a prompt whose greedy output differs from the baseline's."""
    i = record["first_difference"]
    ours, theirs = record["token_ids"], record["baseline"]["token_ids"]
    show = lambda ids: ids[i] if i < len(ids) else "end"
    gap = record.get("log_r_gap")
    return (f"prompt {record['id']}: greedy output differs from {record['baseline']['method']} at token {i} "
            f"({show(ours)} vs {show(theirs)}" + ("" if gap is None else f", log r gap {gap:.4f}") + ")")


def compare_summary(records: list[dict], tps: float) -> dict:
    """Speedup of the method over the baseline (same run), and the greedy identity check."""
    base = [r["baseline"] for r in records]
    tokens, seconds = sum(b["tokens"] for b in base), sum(b["time"] for b in base)
    base_tps = tokens / seconds if seconds > 0 else 0.0
    per_prompt = [b["tokens_per_second"] for b in base]
    base_tps_mean = sum(per_prompt) / len(per_prompt) if per_prompt else 0.0
    ratios = [r["tokens_per_second"] / r["baseline"]["tokens_per_second"] for r in records
              if r["baseline"]["tokens_per_second"] > 0]
    compared = [r for r in records if r.get("identical") is not None]
    return {
        "method": base[0]["method"] if base else None,
        "new_tokens": tokens,
        "seconds": seconds,
        "tokens_per_second": base_tps,
        "tokens_per_second_mean": base_tps_mean,
        "speedup": tps / base_tps if base_tps > 0 else None,  # total tokens / total time, both methods
        "speedup_mean": sum(ratios) / len(ratios) if ratios else None,  # mean of per-prompt ratios
        "greedy_compared": len(compared),
        "identical": sum(1 for r in compared if r["identical"]),
        "differences": [{"id": r["id"], "first_difference": r["first_difference"], "log_r_gap": r.get("log_r_gap")}
                        for r in compared if not r["identical"]],
    }
