"""95% intervals for a report cell, from its per-prompt records (results.jsonl).

Speedup: (Σ tokens / Σ seconds of the method) / (Σ tokens / Σ seconds of the standard method), the
ratio the summary reports, with a paired percentile bootstrap over prompts: each resample draws prompt
indices with replacement and uses the same indices for the method and its baseline, so a prompt that is
slow for both (a long prompt, a burst of load) moves both sides together. Fixed seed: the same records
give the same interval.
Quality: a metric that is 0/1 per prompt (pass@1, accuracy) gets a Wilson score interval; any other
(ROUGE F1) a bootstrap interval of its mean.

    low, high = speedup_interval(method_tokens, method_seconds, base_tokens, base_seconds)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

RESAMPLES = 2000
SEED = 0
Z95 = 1.959963984540054  # the normal quantile of 0.975
PERCENTILES = (2.5, 97.5)


def _indices(n: int, resamples: int, seed: int) -> np.ndarray:
    """resamples × n prompt indices drawn with replacement (one row per bootstrap resample)."""
    return np.random.default_rng(seed).integers(0, n, size=(resamples, n))


def speedup_interval(tokens: Sequence[float], seconds: Sequence[float], base_tokens: Sequence[float],
                     base_seconds: Sequence[float], resamples: int = RESAMPLES, seed: int = SEED
                     ) -> tuple[float, float] | None:
    """Paired bootstrap 95% interval of the ratio of sums (None: no prompts, or no time measured)."""
    columns = np.asarray([tokens, seconds, base_tokens, base_seconds], dtype=float)
    if columns.shape[1] == 0 or (columns[[1, 3]] <= 0).all(axis=1).any():
        return None
    sums = columns[:, _indices(columns.shape[1], resamples, seed)].sum(axis=2)  # 4 × resamples
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = (sums[0] / sums[1]) / (sums[2] / sums[3])
    ratios = ratios[np.isfinite(ratios)]
    low, high = np.percentile(ratios, PERCENTILES)
    return float(low), float(high)


def mean_interval(values: Sequence[float], resamples: int = RESAMPLES, seed: int = SEED) -> tuple[float, float] | None:
    """Bootstrap 95% interval of a mean (None: no values)."""
    values = np.asarray(values, dtype=float)
    if values.size == 0:
        return None
    low, high = np.percentile(values[_indices(values.size, resamples, seed)].mean(axis=1), PERCENTILES)
    return float(low), float(high)


def wilson(successes: float, n: int, z: float = Z95) -> tuple[float, float]:
    """95% Wilson score interval of a proportion (n = 0: the whole [0, 1])."""
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    centre, half = p + z * z / (2 * n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (max(0.0, (centre - half) / (1 + z * z / n)), min(1.0, (centre + half) / (1 + z * z / n)))


def metric_interval(values: Sequence[float]) -> tuple[float, float] | None:
    """Wilson for a 0/1 metric, a bootstrap of the mean otherwise."""
    if not values:
        return None
    if all(v in (0, 1) for v in values):
        return wilson(sum(values), len(values))
    return mean_interval(values)


def quality_intervals(scores: list[dict]) -> dict[str, list[float]]:
    """{metric: [low, high]} over per-prompt score dicts."""
    keys = sorted({k for s in scores for k in s})
    return {k: list(metric_interval([s[k] for s in scores if k in s])) for k in keys}


def cell_intervals(records: list[dict]) -> dict:
    """A finished cell's intervals: speedup over its baseline, quality of the method and of the baseline."""
    paired = [r for r in records if "baseline" in r]
    base = [r["baseline"] for r in paired]
    speedup = speedup_interval([r["tokens"] for r in paired], [r["time"] for r in paired],
                               [b["tokens"] for b in base], [b["time"] for b in base]) if paired else None
    return {"speedup_interval": None if speedup is None else list(speedup),
            "quality_interval": quality_intervals([r["score"] for r in records]),
            "standard_quality_interval": quality_intervals([b["score"] for b in base]) if base else None}
