"""Distribution statistics: mean/std/min/max, percentiles and a bootstrap CI for p99."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from servetune.results.schema import Stats

PERCENTILES = (50.0, 90.0, 95.0, 99.0, 99.9)
_BOOTSTRAP_N = 20_000  # larger samples use the order-statistic interval
_BOOTSTRAP_WORK = 4_000_000  # values drawn in all by one bootstrap
_BOOTSTRAP_MAX = 1000
_BOOTSTRAP_MIN = 200


def p99_bootstrap_ci(values: np.ndarray, seed: int = 0) -> tuple[float, float] | None:
    """95% confidence interval of the 99th percentile.

    Percentile bootstrap up to ``_BOOTSTRAP_N`` values; beyond that (pooled ITL of long
    runs) the distribution-free order-statistic interval, whose ranks come from the normal
    approximation to Binomial(n, 0.99) — exact enough there, and free.
    """
    n = len(values)
    if n < 2:
        return None
    if n > _BOOTSTRAP_N:
        half = 1.96 * math.sqrt(n * 0.99 * 0.01)
        lo_rank = max(0, math.floor(n * 0.99 - half) - 1)
        hi_rank = min(n - 1, math.ceil(n * 0.99 + half))
        part = np.partition(values, (lo_rank, hi_rank))
        return float(part[lo_rank]), float(part[hi_rank])
    reps = int(min(_BOOTSTRAP_MAX, max(_BOOTSTRAP_MIN, _BOOTSTRAP_WORK // n)))
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(reps, n))
    ests = np.percentile(values[idx], 99.0, axis=1)
    lo, hi = np.percentile(ests, [2.5, 97.5])
    return float(lo), float(hi)


def describe(values: Sequence[float] | np.ndarray, unit: str = "ms", ci: bool = True) -> Stats:
    """Stats of a sample; an empty sample gives count 0 and no figures."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0:
        return Stats(unit=unit)
    p50, p90, p95, p99, p999 = (float(x) for x in np.percentile(arr, PERCENTILES))
    return Stats(
        count=int(arr.size),
        mean=float(arr.mean()),
        std=float(arr.std()),
        min=float(arr.min()),
        max=float(arr.max()),
        p50=p50,
        p90=p90,
        p95=p95,
        p99=p99,
        p999=p999,
        p99_ci=p99_bootstrap_ci(arr) if ci else None,
        unit=unit,
    )
