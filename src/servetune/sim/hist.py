"""Prometheus-style histograms with vLLM's bucket bounds, kept cumulative like a scrape."""

from __future__ import annotations

from bisect import bisect_left
from itertools import accumulate
from typing import Any

# Bucket upper bounds (seconds) as vLLM's metrics define them (vllm/v1/metrics/loggers.py).
# fmt: off
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)
TPOT_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0,
)
REQUEST_LATENCY_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
    240.0, 480.0, 960.0, 1920.0, 7680.0,
)
# The simulated server's own event-loop lag (not a vLLM metric).
LAG_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0015, 0.002, 0.003, 0.005, 0.01, 0.025, 0.05, 0.1,
)
# fmt: on


class Hist:
    """A histogram: per-bucket counts (the last slot is +Inf), sum and count."""

    __slots__ = ("_snap", "bounds", "count", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0
        self.count = 0
        self._snap: dict[str, Any] | None = None

    def observe(self, value: float, n: int = 1) -> None:
        self.counts[bisect_left(self.bounds, value)] += n
        self.sum += value * n
        self.count += n

    def cumulative(self) -> list[tuple[float, int]]:
        out = list(zip(self.bounds, accumulate(self.counts[:-1]), strict=True))
        out.append((float("inf"), self.count))
        return out

    def snapshot(self) -> dict[str, Any]:
        """The ServerSample form: {"buckets": [[le, cumulative], ...], "sum", "count"}; the
        +Inf bucket is left out (JSON has no infinity): ``count`` carries it. Unchanged
        since the last call (no observation since), the same object again."""
        snap = self._snap
        if snap is None or snap["count"] != self.count:
            # zip stops at the last finite bound: the +Inf slot is left out without a copy
            snap = self._snap = {
                "buckets": list(zip(self.bounds, accumulate(self.counts))),  # noqa: B905
                "sum": self.sum,
                "count": self.count,
            }
        return snap

    def quantile(self, q: float) -> float | None:
        """Upper bound of the bucket holding the q-quantile (coarse, for logs)."""
        if not self.count:
            return None
        target = q * self.count
        acc = 0
        for le, c in zip(self.bounds, self.counts, strict=False):
            acc += c
            if acc >= target:
                return le
        return float("inf")
