"""Percentiles from cumulative Prometheus histograms, over a window.

A server histogram is cumulative since the server started; what a run saw is the difference
of two snapshots (:func:`window`: last − first), or over many, the sum of every step's
(:func:`increase`: a restart in between counts the new process from zero). Percentiles
interpolate linearly inside the bucket that holds the rank, exactly as Prometheus'
``histogram_quantile`` does:

- buckets sorted by upper bound; the ``+Inf`` bucket's count is ``Histogram.count``;
- rank = q × count; the first bucket whose cumulative count ≥ rank holds it;
- inside it, value = lower + (upper − lower) × (rank − count below) / (count in bucket),
  the lower bound of the first bucket being 0 (or the bucket's own bound when that is ≤ 0);
- a rank in the ``+Inf`` bucket returns the highest finite bound (all that is known);
- cumulative counts that dip (a scrape racing an update) are made monotonic first.

So a percentile is only as fine as the buckets: vLLM's TTFT buckets jump 0.1 → 0.25 → 0.5 s.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence

from servetune.results.server_series import Histogram

_INF = math.inf


def _finite_buckets(h: Histogram) -> tuple[list[tuple[float, float]], float]:
    """(sorted finite buckets, total count) — an in-memory +Inf bucket folds into the count."""
    buckets = h.buckets
    total = h.count
    # a NaN bound fails both comparisons and a NaN count is not equal to itself: both dropped
    finite = [b for b in buckets if -_INF < b[0] < _INF and b[1] == b[1]]
    if len(finite) != len(buckets):
        for le, c in buckets:
            if le == _INF and c == c:
                total = max(total, c)
    finite.sort()
    return finite, total


def _read(h: Histogram) -> tuple[tuple[float, ...], list[float], float]:
    """(bounds, counts, total) of a snapshot's finite buckets (:func:`_finite_buckets`)."""
    finite, total = _finite_buckets(h)
    return tuple(le for le, _ in finite), [c for _, c in finite], total


def window(first: Histogram | None, last: Histogram) -> Histogram:
    """What was observed between two snapshots of the same cumulative histogram.

    A reset in between — any count went down, or the bucket bounds changed (the server
    restarted, perhaps with other buckets) — makes the later snapshot the best estimate.
    """
    if first is None:
        return last
    b1, n1 = _finite_buckets(first)
    b2, n2 = _finite_buckets(last)
    if n2 < n1 or [le for le, _ in b1] != [le for le, _ in b2]:
        return last
    if any(c2 < c1 for (_, c1), (_, c2) in zip(b1, b2, strict=True)):
        return last
    diff = [(le, c2 - c1) for (le, c1), (_, c2) in zip(b1, b2, strict=True)]
    return Histogram.model_construct(
        buckets=diff, sum=max(0.0, last.sum - first.sum), count=n2 - n1
    )


def increase(snapshots: Sequence[Histogram]) -> Histogram | None:
    """What was observed over consecutive snapshots of one cumulative histogram: the sum of
    every step's :func:`window`, so that a reset in between (the server restarted) counts the
    new process from zero — Prometheus' ``increase`` for every bucket, as
    :func:`servetune.metrics.server_summary.counter_increase` does for counters. Comparing only
    the two end snapshots cannot see a reset when the new process has by then observed more
    than the old one had (a crash loop): every bucket grew, and last − first mixes the two.
    Bucket bounds that change (a restart with other buckets) start the sum over."""
    if not snapshots:
        return None
    if len(snapshots) == 1:
        return snapshots[0]
    # :func:`window` of every pair, each snapshot's buckets read once (a run's server summary
    # reads hundreds of snapshots of seven histograms): the same values in the same order
    # a server that observed nothing between two scrapes hands the same snapshot object
    # again: read once, and the empty step it makes skipped (it adds zeros)
    memo: dict[int, tuple[tuple[float, ...], list[float], float]] = {}
    read = []
    for h in snapshots:
        got = memo.get(id(h))
        if got is None:
            got = memo[id(h)] = _read(h)
        read.append(got)
    bounds: tuple[float, ...] | None = None
    counts: list[float] = []
    total = 0.0
    total_sum = 0.0
    for i in range(1, len(snapshots)):
        if bounds is not None and snapshots[i] is snapshots[i - 1]:
            continue
        (les1, c1, n1), (les, c2, n2) = read[i - 1], read[i]
        if n2 < n1 or les1 != les or any(map(operator.lt, c2, c1)):
            step, n, step_sum = c2, n2, snapshots[i].sum  # a reset: the later snapshot
        else:
            step = list(map(operator.sub, c2, c1))
            n = n2 - n1
            step_sum = max(0.0, snapshots[i].sum - snapshots[i - 1].sum)
        if bounds is None or les != bounds:
            bounds, counts, total, total_sum = les, [0.0] * len(les), 0.0, 0.0
        counts = list(map(operator.add, counts, step))
        total += n
        total_sum += step_sum
    assert bounds is not None
    return Histogram.model_construct(
        buckets=list(zip(bounds, counts, strict=True)),
        sum=total_sum,
        # a count of observations stays a whole number, as the two-snapshot window gives it
        count=int(total) if float(total).is_integer() else total,
    )


def quantile(q: float, h: Histogram) -> float | None:
    """The q-quantile (0 ≤ q ≤ 1) of histogram ``h``; None when it holds no observation."""
    found = _locate(q, h)
    return None if found is None else found[0]


def bucket_of(q: float, h: Histogram) -> tuple[float, float] | None:
    """The (lower, upper) bounds of the bucket the q-quantile lies in: all that the histogram
    really knows about it (upper is +inf past the last finite bound)."""
    found = _locate(q, h)
    return None if found is None else (found[1], found[2])


def _locate(q: float, h: Histogram) -> tuple[float, float, float] | None:
    """(interpolated value, bucket lower bound, bucket upper bound) of the q-quantile."""
    if math.isnan(q):
        return None
    if q < 0:
        return -math.inf, -math.inf, -math.inf
    if q > 1:
        return math.inf, math.inf, math.inf
    finite, total = _finite_buckets(h)
    if total <= 0 or math.isnan(total):
        return None
    if not finite:
        return None  # only a +Inf bucket: nothing to interpolate within
    # Monotonic: a cumulative count never decreases (Prometheus' ensureMonotonic).
    cum: list[float] = []
    running = 0.0
    for _, c in finite:
        running = max(running, c)
        cum.append(running)
    total = max(total, running)
    rank = q * total
    b = 0
    while b < len(cum) and cum[b] < rank:
        b += 1
    if b == len(cum):
        top = finite[-1][0]
        return top, top, math.inf  # in the +Inf bucket: the highest finite bound
    upper = finite[b][0]
    if b == 0:
        if upper <= 0:
            return upper, -math.inf, upper
        lower, below = 0.0, 0.0
    else:
        lower, below = finite[b - 1][0], cum[b - 1]
    in_bucket = cum[b] - below
    if in_bucket <= 0:
        return upper, lower, upper
    return lower + (upper - lower) * ((rank - below) / in_bucket), lower, upper


def mean(h: Histogram) -> float | None:
    _, total = _finite_buckets(h)
    if total <= 0:
        return None
    return h.sum / total


def describe(
    h: Histogram, qs: tuple[float, ...] = (0.5, 0.9, 0.95, 0.99)
) -> dict[str, float | list[float]]:
    """count, mean, the percentiles ``p50``… of ``h`` (in its own unit) and, as ``p50_bucket``
    …, the [lower, upper] bounds of the bucket each lies in (upper null past the last finite
    bound); {} when empty.

    The bucket says how much the interpolated value can be trusted: vLLM's queue-time buckets
    start at 0.3 s, so a p50 of "0.15 s" there only means "somewhere below 0.3 s".
    """
    _, total = _finite_buckets(h)
    if total <= 0:
        return {}
    out: dict[str, float | list[float]] = {"count": total}
    m = mean(h)
    if m is not None:
        out["mean"] = m
    for q in qs:
        found = _locate(q, h)
        if found is not None:
            out[_pname(q)] = found[0]
            out[_pname(q) + "_bucket"] = [found[1], found[2]]
    return out


def _pname(q: float) -> str:
    pct = q * 100
    text = f"{pct:g}".replace(".", "")
    return f"p{text}"
