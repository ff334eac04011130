"""The engine's statistics over a run of generate_until requests, logged as they come and at the end.

Records have the runner's shape (runner/summary.py `record_stats`, runner/run.py `generate_pair`), so
the totals are the runner's: acceptance rate = accepted / drafted, mean acceptance length = 1 +
accepted / rounds, tokens/s = total new tokens / total decode time, the speedup docs/algorithm.md §6 predicts
from the measured α and per-call costs, and with compare_with the speedup measured over the baseline
in the same process (and the greedy identity check).
"""

from __future__ import annotations

import logging

from ..runner.compare import difference_message
from ..runner.summary import summarize

log = logging.getLogger("cos.lm_eval")


def fmt(value, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


class Tally:
    def __init__(self, method: str) -> None:
        self.method = method
        self.records: list[dict] = []

    def add(self, record: dict) -> None:
        record = {**record, "id": len(self.records)}
        self.records.append(record)
        log.debug("request %d: %d tokens, %.2f tok/s, acceptance rate %s, mean acceptance length %s, stop %s",
                  record["id"], record["tokens"], record["tokens_per_second"], fmt(record["acceptance_rate"]),
                  fmt(record["mean_acceptance_length"], ".2f"), record["stop_reason"])
        if record.get("identical") is False:
            log.warning(difference_message(record))

    def summary(self) -> dict:
        """The runner's summary of every request so far (summary.json's keys, quality left to lm-eval)."""
        return summarize(self.records, method=self.method, quality={}, selected=len(self.records), info={})

    def log_summary(self) -> dict:
        s = self.summary()
        if not self.records:
            return s
        line = (f"{self.method}: {s['prompts']} requests, {s['new_tokens']} new tokens, "
                f"{s['tokens_per_second']:.2f} tokens/s, acceptance rate {fmt(s['acceptance_rate'])}, "
                f"mean acceptance length {fmt(s['mean_acceptance_length'], '.2f')}, "
                f"predicted speedup {fmt(s['predicted_speedup'], '.2f')}")
        c = s.get("compare_with")
        if c:
            line += (f", measured speedup {fmt(s['measured_speedup'], '.2f')} over {c['method']} "
                     f"({c['tokens_per_second']:.2f} tokens/s)")
            if c["greedy_compared"]:
                line += f", greedy outputs identical on {c['identical']}/{c['greedy_compared']}"
        log.info(line)
        return s
