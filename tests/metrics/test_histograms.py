"""Percentiles from cumulative buckets, against values computed by hand."""

from __future__ import annotations

import math

import pytest

from servetune.metrics.histograms import bucket_of, describe, mean, quantile, window
from servetune.results.server_series import Histogram

# 50 observations: 10 in (0, 0.1], 20 in (0.1, 0.5], 10 in (0.5, 1], 10 above 1.
H = Histogram(buckets=[(0.1, 10), (0.5, 30), (1.0, 40)], sum=30.0, count=50)


@pytest.mark.parametrize(
    ("q", "expected"),
    [
        (0.10, 0.05),  # rank 5 in the first bucket: 0 + 0.1 * 5/10
        (0.20, 0.1),  # rank 10 = the first bucket's count: its upper bound
        (0.50, 0.4),  # rank 25: 0.1 + 0.4 * (25-10)/20
        (0.70, 0.75),  # rank 35: 0.5 + 0.5 * (35-30)/10
        (0.80, 1.0),  # rank 40: the last finite bound
        (0.90, 1.0),  # rank 45 lies in +Inf: the highest finite bound is all we know
        (0.0, 0.0),
        (1.0, 1.0),
    ],
)
def test_quantile_by_hand(q: float, expected: float) -> None:
    assert quantile(q, H) == pytest.approx(expected)


def test_quantile_edges() -> None:
    assert quantile(-0.1, H) == -math.inf
    assert quantile(1.1, H) == math.inf
    assert quantile(float("nan"), H) is None
    assert quantile(0.5, Histogram(buckets=[(0.1, 0), (1.0, 0)], count=0)) is None
    assert quantile(0.5, Histogram(buckets=[], count=5)) is None
    # a first bucket with a bound <= 0 returns that bound, as Prometheus does
    neg = Histogram(buckets=[(0.0, 5), (1.0, 10)], count=10)
    assert quantile(0.25, neg) == 0.0
    assert quantile(0.75, neg) == pytest.approx(0.5)


def test_inf_bucket_given_in_memory_counts_as_total() -> None:
    h = Histogram(buckets=[(0.1, 10), (0.5, 30), (1.0, 40), (math.inf, 50)], sum=30, count=0)
    assert quantile(0.5, h) == pytest.approx(0.4)
    assert quantile(0.9, h) == 1.0


def test_non_monotonic_buckets_are_made_monotonic() -> None:
    # a scrape racing an update can show a later bucket below an earlier one
    h = Histogram(buckets=[(0.1, 10), (0.5, 8), (1.0, 20)], count=20)
    # cumulative becomes 10, 10, 20: rank 15 lies in (0.5, 1.0]: 0.5 + 0.5 * 5/10
    assert quantile(0.75, h) == pytest.approx(0.75)


def test_window_is_last_minus_first() -> None:
    first = Histogram(buckets=[(0.1, 5), (0.5, 10), (1.0, 10)], sum=3.0, count=12)
    last = Histogram(buckets=[(0.1, 15), (0.5, 40), (1.0, 50)], sum=33.0, count=62)
    w = window(first, last)
    assert w.buckets == [(0.1, 10), (0.5, 30), (1.0, 40)]
    assert (w.sum, w.count) == (30.0, 50)
    assert quantile(0.5, w) == pytest.approx(0.4)
    assert window(None, last) is last


def test_window_after_a_reset_uses_the_later_snapshot() -> None:
    first = Histogram(buckets=[(0.1, 50), (1.0, 90)], sum=40.0, count=100)
    last = Histogram(buckets=[(0.1, 3), (1.0, 5)], sum=2.0, count=6)
    assert window(first, last) is last


def test_window_across_a_bucket_layout_change_uses_the_later_snapshot() -> None:
    # other bounds mean another server (or config) started between the snapshots
    first = Histogram(buckets=[(0.1, 5)], sum=1.0, count=5)
    last = Histogram(buckets=[(0.1, 7), (1.0, 9)], sum=2.0, count=9)
    assert window(first, last) is last


def test_mean_and_describe() -> None:
    assert mean(H) == pytest.approx(0.6)
    d = describe(H)
    assert d["count"] == 50
    assert d["mean"] == pytest.approx(0.6)
    assert d["p50"] == pytest.approx(0.4)
    assert d["p90"] == 1.0
    plain = {k for k in d if not k.endswith("_bucket")}
    assert plain == {"count", "mean", "p50", "p90", "p95", "p99"}
    assert d["p50_bucket"] == [0.1, 0.5]
    assert d["p90_bucket"] == [1.0, math.inf]
    assert describe(Histogram(buckets=[], count=0)) == {}
    assert "p999" in describe(H, qs=(0.999,))


def test_bucket_of_tells_the_resolution() -> None:
    assert bucket_of(0.10, H) == (0.0, 0.1)
    assert bucket_of(0.50, H) == (0.1, 0.5)
    assert bucket_of(0.70, H) == (0.5, 1.0)
    assert bucket_of(0.90, H) == (1.0, math.inf)
    assert bucket_of(0.5, Histogram(buckets=[], count=0)) is None
    # vLLM's queue-time buckets start at 0.3 s: a p50 of 0.15 s is only "below 0.3 s"
    queue = Histogram(buckets=[(0.3, 199), (0.5, 199)], sum=2.6, count=199)
    assert quantile(0.5, queue) == pytest.approx(0.15)
    assert bucket_of(0.5, queue) == (0.0, 0.3)
