"""Per-prompt records -> one summary (summary.json), with vLLM's metric definitions (CONTRIBUTING.md §13).

Speed is decode speed: the engine's wall time from the first decoding step to the last committed
token (prefill and tokenization excluded; `e2e_seconds` includes them). Two averages, because they
differ when prompts differ in length: total tokens / total time, and the mean of per-prompt rates.
acceptance rate = accepted / drafted; mean acceptance length = 1 + accepted / rounds (all prompts).
predicted_speedup: docs/algorithm.md §6 from the run's measured α and per-call costs (stats.predict_speedup
on the totals); measured_speedup: over the compare_with baseline in the same run, when there is one.
"""

from __future__ import annotations

from ..plan import LOOPS
from ..stats import GenerationStats, MemberUsage, predict_speedup
from .compare import compare_summary


def record_stats(generation, seconds_e2e: float) -> dict:
    """The record fields taken from one Generation (see run.py for the rest)."""
    s = generation.stats.as_dict()
    return {
        "tokens": s["new_tokens"], "token_ids": list(generation.tokens), "time": s["wall_seconds"],
        "e2e_time": seconds_e2e, "tokens_per_second": s["tokens_per_second"], "rounds": s["rounds"],
        "drafted": s["drafted"], "accepted": s["accepted"], "acceptance_rate": s["acceptance_rate"],
        "mean_acceptance_length": s["mean_acceptance_length"], "cost_ratio": s["cost_ratio"],
        "predicted_speedup": s["predicted_speedup"], "stop_reason": s["stop_reason"],
        "gamma": s["gamma"], "proposer": s["proposer"], "bonus": s["bonus"], "draft_threshold": s["draft_threshold"],
        "schedule": s["schedule"], "tree": s["tree"], "weights": s["weights"], "members": s["members"],
        "row_invariance": s["row_invariance"], "bytes": s["new_bytes"], "bytes_per_second": s["bytes_per_second"],
        **({"byte_level": s["byte_level"]} if s["byte_level"] else {}),
    }


def total_stats(records: list[dict], method: str) -> GenerationStats:
    """One GenerationStats summed over prompts (members: calls, tokens and seconds summed)."""
    first = records[0]
    members = [MemberUsage(m["name"], 0, 0, 0.0) for m in first["members"]]
    for r in records:
        for total, m in zip(members, r["members"]):
            total.calls += m["calls"]
            total.tokens += m["tokens"]
            total.seconds += m["seconds"]
    return GenerationStats(method=method, new_tokens=sum(r["tokens"] for r in records),
                           wall_seconds=sum(r["time"] for r in records), rounds=sum(r["rounds"] for r in records),
                           drafted=sum(r["drafted"] for r in records), accepted=sum(r["accepted"] for r in records),
                           gamma=first["gamma"], proposer=first["proposer"], bonus=first["bonus"],
                           draft_threshold=first.get("draft_threshold", 0.0), schedule=first.get("schedule", ""),
                           tree=first.get("tree", ""), weights=first.get("weights", []), members=members)


def byte_level_totals(records: list[dict]) -> dict | None:
    """Over bytes: the pruned mass per byte of each member (a bound on what pruning changed) and revivals."""
    rows = [r["byte_level"] for r in records if r.get("byte_level")]
    if not rows:
        return None
    n_bytes = max(1, sum(r.get("bytes", 0) for r in records))
    pruned = [sum(row["pruned"][i] for row in rows) / n_bytes for i in range(len(rows[0]["pruned"]))]
    return {"prune": rows[0]["prune"], "pruned_per_byte": pruned,
            "revived": [sum(row["revived"][i] for row in rows) for i in range(len(pruned))]}


def summarize(records: list[dict], *, method: str, quality: dict, selected: int, info: dict) -> dict:
    """The summary of the records of one selection (`selected` prompts; complete when all are done)."""
    summary = {**info, "method": method, "prompts": len(records), "selected": selected,
               "complete": len(records) == selected, "quality": quality}
    if not records:
        return summary
    totals = total_stats(records, method)
    rates = [r["tokens_per_second"] for r in records]
    predicted = predict_speedup(totals, LOOPS[method])
    summary.update({
        "new_tokens": totals.new_tokens,
        "seconds": totals.wall_seconds,
        "e2e_seconds": sum(r["e2e_time"] for r in records),
        "tokens_per_second": totals.tokens_per_second,
        "tokens_per_second_mean": sum(rates) / len(rates),
        "bytes_per_second": sum(r.get("bytes", 0) for r in records) / totals.wall_seconds if totals.wall_seconds else 0.0,
        "byte_level": byte_level_totals(records),
        "rounds": totals.rounds,
        "drafted": totals.drafted,
        "accepted": totals.accepted,
        "acceptance_rate": totals.acceptance_rate,
        "mean_acceptance_length": totals.mean_acceptance_length,
        "cost_ratio": totals.cost_ratio,
        "gamma": totals.gamma if LOOPS[method] != "standard" else None,  # nothing drafted: no γ, no proposer
        "proposer": totals.proposer if LOOPS[method] != "standard" else None,
        "bonus": totals.bonus,
        "draft_threshold": totals.draft_threshold,
        "tree": totals.tree,
        "predicted_speedup": predicted,
        "measured_speedup": None,
        "measured_over_predicted": None,
        "compare_with": None,
        "row_invariance": next((r["row_invariance"] for r in records if r.get("row_invariance")), None),
    })
    if all("baseline" in r for r in records):
        comparison = compare_summary(records, totals.tokens_per_second)
        summary["compare_with"] = comparison
        summary["measured_speedup"] = comparison["speedup"]
        if comparison["speedup"] and predicted:
            summary["measured_over_predicted"] = comparison["speedup"] / predicted  # the engine's own overhead
    return summary


def summary_lines(s: dict) -> list[str]:
    """The run as a table, one row per method (the compare_with baseline first), then the identity check.

    | method | pass@1 | tokens/s | speedup | acceptance rate | mean acceptance length | predicted speedup |
    """
    fmt = lambda v, spec=".3f": "-" if v is None else format(v, spec)
    header = f"{s['method']} on {s.get('dataset')}, {s['prompts']}/{s['selected']} prompts"
    if not s["prompts"]:
        return [header + ": nothing generated"]
    quality = list(s["quality"])
    cols = ["method", *quality, "tokens/s", "speedup", "acceptance rate", "mean acceptance length",
            "predicted speedup"]
    rows = []
    c = s.get("compare_with")
    if c:
        rows.append([c["method"], *(fmt(c.get("quality", {}).get(q)) for q in quality),
                     fmt(c["tokens_per_second"], ".2f"), "1.00", "-", "-", "-"])
    accelerated = s["drafted"] > 0
    rows.append([s["method"], *(fmt(s["quality"][q]) for q in quality), fmt(s["tokens_per_second"], ".2f"),
                 fmt(s["measured_speedup"], ".2f"), fmt(s["acceptance_rate"] if accelerated else None),
                 fmt(s["mean_acceptance_length"] if accelerated else None, ".2f"), fmt(s["predicted_speedup"], ".2f")])
    lines = [header, "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    if c and c["greedy_compared"]:
        gaps = [d.get("log_r_gap") for d in c.get("differences", [])]
        lines.append(f"greedy outputs identical to {c['method']} on {c['identical']}/{c['greedy_compared']} prompts"
                     + (" (log r gap at each first difference, near 0 = a float tie: "
                        + ", ".join("?" if g is None else f"{g:.4f}" for g in gaps) + ")" if gaps else ""))
        if s.get("row_invariance"):
            lines.append(f"verify rows are not bitwise one-token steps' rows here ({s['row_invariance']}): "
                         f"a difference at a near-tie is rounding, not the method")
    b = s.get("byte_level")
    if b:
        lines.append(f"over bytes (members' tokenizers differ): {s['bytes_per_second']:.2f} bytes/s; tokens counted in "
                     f"the first member's tokenizer; pruned mass per byte {', '.join(f'{x:.1e}' for x in b['pruned_per_byte'])}"
                     f" (prune {b['prune'][0]:g}), revivals {b['revived']}")
    load = s.get("load")
    if load and load.get("busy"):
        from ..machine import Load

        lines.append(Load(**{k: load[k] for k in ("cores", "loadavg_before", "loadavg_after", "others_cores")}).warning())
    lines.append(f"results: {s.get('output_dir')}")
    return lines
