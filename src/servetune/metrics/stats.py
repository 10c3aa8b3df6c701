"""Distribution statistics: mean/std/min/max, percentiles and a bootstrap CI for p99."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from servetune.results.schema import Stats

PERCENTILES = (50.0, 90.0, 95.0, 99.0, 99.9)
_BOOTSTRAP_WORK = 20_000_000  # samples drawn in all; bounds the CI's cost on pooled ITL
_BOOTSTRAP_MAX = 1000
_BOOTSTRAP_MIN = 100


def p99_bootstrap_ci(values: np.ndarray, seed: int = 0) -> tuple[float, float] | None:
    """95% percentile-bootstrap interval of the 99th percentile."""
    n = len(values)
    if n < 2:
        return None
    reps = int(min(_BOOTSTRAP_MAX, max(_BOOTSTRAP_MIN, _BOOTSTRAP_WORK // n)))
    rng = np.random.default_rng(seed)
    ests = np.empty(reps)
    # Chunked so that a long ITL array never materialises reps × n at once.
    chunk = max(1, _BOOTSTRAP_WORK // (10 * n))
    for start in range(0, reps, chunk):
        k = min(chunk, reps - start)
        idx = rng.integers(0, n, size=(k, n))
        ests[start : start + k] = np.percentile(values[idx], 99.0, axis=1)
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
