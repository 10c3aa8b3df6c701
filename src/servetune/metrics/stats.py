"""Distribution statistics: mean/std/min/max, percentiles and a bootstrap CI for p99."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from servetune.results.schema import Stats

PERCENTILES = (50.0, 90.0, 95.0, 99.0, 99.9)
_EXACT_N = 20_000  # larger samples use the order-statistic interval


def _order_stat_quantile(sorted_vals: np.ndarray, rank: int, qs: tuple[float, ...]) -> list[float]:
    """Quantiles ``qs`` of the ``rank``-th smallest (0-based) of a bootstrap resample.

    A resample of n draws has its ``rank``-th smallest ≤ x_(j) exactly when at least
    ``rank + 1`` draws land on the j + 1 smallest values: Binomial(n, (j+1)/n) ≥ rank + 1.
    Only the upper tail k ∈ [rank + 1, n] is summed (1% of n for the p99)."""
    n = len(sorted_vals)
    m = rank + 1
    ks = np.arange(m, n + 1, dtype=np.float64)
    lgamma = np.vectorize(math.lgamma, otypes=[np.float64])
    log_c = math.lgamma(n + 1) - lgamma(ks + 1) - lgamma(n - ks + 1)
    sd = math.sqrt(max(n * 0.01, 1.0))
    lo_j = max(0, int(rank - 8 * sd - 2))
    js = np.arange(lo_j, n, dtype=np.int64)
    p = (js + 1) / n
    with np.errstate(divide="ignore", invalid="ignore"):
        log_p = np.log(p)[:, None]
        log_q = np.log1p(-p)[:, None]
        terms = np.where(
            ks[None, :] == n, ks[None, :] * log_p, ks[None, :] * log_p + (n - ks[None, :]) * log_q
        )
    cdf = np.minimum(np.exp(log_c[None, :] + terms).sum(axis=1), 1.0)
    cdf[-1] = 1.0  # j = n - 1: every draw is ≤ the largest value
    out = []
    for q in qs:
        j = int(js[min(len(js) - 1, int(np.searchsorted(cdf, q)))])
        out.append(float(sorted_vals[j]))
    return out


def p99_bootstrap_ci(values: np.ndarray, seed: int = 0) -> tuple[float, float] | None:
    """95% confidence interval of the 99th percentile.

    Up to ``_EXACT_N`` values: the percentile bootstrap computed exactly instead of by
    resampling (the limit of infinitely many resamples). numpy's p99 of a resample is
    ``y_(i) + g·(y_(i+1) − y_(i))`` with ``h = 0.99·(n−1)``, ``i = ⌊h⌋``, ``g = h − i``;
    the distribution of each order statistic of a resample is binomial (see
    :func:`_order_stat_quantile`), and the interval's ends interpolate the two order
    statistics' 2.5% and 97.5% quantiles the same way. Beyond that (pooled ITL of long runs)
    the distribution-free order-statistic interval, whose ranks come from the normal
    approximation to Binomial(n, 0.99). ``seed`` is kept for callers; nothing is random.
    """
    del seed
    n = len(values)
    if n < 2:
        return None
    if n > _EXACT_N:
        half = 1.96 * math.sqrt(n * 0.99 * 0.01)
        lo_rank = max(0, math.floor(n * 0.99 - half) - 1)
        hi_rank = min(n - 1, math.ceil(n * 0.99 + half))
        part = np.partition(values, (lo_rank, hi_rank))
        return float(part[lo_rank]), float(part[hi_rank])
    sorted_vals = np.sort(values)
    h = 0.99 * (n - 1)
    i = math.floor(h)
    g = h - i
    lo_i, hi_i = _order_stat_quantile(sorted_vals, i, (0.025, 0.975))
    if g == 0 or i + 1 >= n:
        return lo_i, hi_i
    lo_n, hi_n = _order_stat_quantile(sorted_vals, i + 1, (0.025, 0.975))
    return lo_i + g * (lo_n - lo_i), hi_i + g * (hi_n - hi_i)


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
