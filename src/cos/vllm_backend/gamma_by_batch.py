"""Draft length by batch size: speculation that does not lose at batch scale (vLLM's dynamic speculation).

A speculative step costs γ draft forwards plus one verify pass over γ + 1 tokens per request. At batch 1
on a CPU the verify pass costs about one step (memory-bound) and speculation pays; as the batch grows the
pass becomes compute-bound, γ + 1 tokens per request cost up to γ + 1 times one, and speculation loses
(batch 8 ran at 0.82-0.87x of no speculation, issue 12). vLLM 0.32's scheduler looks the step's γ up by
the number of requests it schedules (`num_speculative_tokens_per_batch_size`), 0 meaning a standard step;
`python -m scripts.bench vllm --calibrate` measures each batch size's best γ on the machine at hand and prints the
table to pass as `VllmEngine(..., speculative_by_batch=...)`.

Exactness: the length depends on the batch size only, never on a draw, and every length verifies
against r the same way (greedy: the same tokens, tested in tests/vllm/test_vllm_gamma_by_batch.py).
"""

from __future__ import annotations

from collections.abc import Sequence

Table = list[tuple[int, int, int]]  # (first batch size, last batch size, γ), inclusive, sorted


def check_table(table: Sequence[Sequence[int]], gamma: int) -> Table:
    """The table as vLLM takes it, or a ValueError naming what is wrong, before vLLM starts.
    Batch sizes past the last row keep its γ; γ above num_speculative_tokens is cut to it by vLLM."""
    rows: Table = []
    for row in table:
        if len(row) != 3 or not all(isinstance(v, int) for v in row):
            raise ValueError(f"speculative_by_batch: each row is (first, last, γ) integers, got {row!r}")
        first, last, k = row
        if k < 0 or first > last:
            raise ValueError(f"speculative_by_batch row {row!r}: needs first <= last and γ >= 0")
        if rows and first <= rows[-1][1]:
            raise ValueError(f"speculative_by_batch rows overlap or are unsorted: {rows[-1]!r} then {row!r}")
        if not rows and first != 1:
            raise ValueError(f"speculative_by_batch must start at 1 (every batch size needs a γ), got {row!r}")
        rows.append((first, last, k))
    if not rows:
        raise ValueError("speculative_by_batch is empty: give rows (first, last, γ), e.g. [(1, 4, 3), (5, 256, 0)]")
    if max(k for _, _, k in rows) > gamma:
        raise ValueError(f"speculative_by_batch asks for γ {max(k for _, _, k in rows)} > num_speculative_tokens "
                         f"{gamma}: raise num_speculative_tokens (the most any step drafts)")
    return rows


def best_gamma_table(rates: dict[int, dict[int, float]]) -> Table:
    """From measured tokens/s per batch size and γ ({batch: {γ: tok/s}}, γ = 0: no speculation), the
    table that runs each measured batch size at its fastest γ (ties: the shorter), each row covering the
    batch sizes up to the next measured one."""
    sizes = sorted(rates)
    table: Table = []
    for i, b in enumerate(sizes):
        best = max(sorted(rates[b]), key=lambda k: (rates[b][k], -k))
        first = 1 if i == 0 else b
        last = sizes[i + 1] - 1 if i + 1 < len(sizes) else 4096
        if table and table[-1][2] == best:
            table[-1] = (table[-1][0], last, best)
        else:
            table.append((first, last, best))
    return table
