"""The sweep's levels as its analyses see them (the knee, :mod:`servetune.sweep.knee`, and the
SLO-max, :mod:`servetune.sweep.slo`): one :class:`Point` per load, several runs at one load
merged, and the non-decreasing fit that makes a P99 series monotone in load.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from servetune.results.sweep_schema import LevelRow, MetricName

METRICS: tuple[MetricName, ...] = ("ttft", "tpot", "e2el")
"""The latency metrics whose P99 a point carries."""


@dataclass(frozen=True)
class Point:
    """One load level as the knee sees it (several runs at one load are merged)."""

    label: str
    load: float
    throughput: float
    output_throughput: float = 0.0
    p99: dict[str, float] = field(default_factory=dict)
    ci: dict[str, tuple[float, float]] = field(default_factory=dict)
    spread: dict[str, float] = field(default_factory=dict)
    """Run-to-run relative spread ((max − min) / median of P99) when the load was run twice+."""
    mean_e2e_ms: float | None = None
    server_running: float | None = None
    client_concurrency: float | None = None
    client_behind: bool = False


def _median(values: Sequence[float]) -> float:
    return float(np.median(np.asarray(values, dtype=float)))


def _mean_opt(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return float(np.mean(vals)) if vals else None


def points_from_rows(rows: Sequence[LevelRow]) -> list[Point]:
    """Usable points in load order; rows at the same load are merged (median P99s)."""
    groups: dict[float, list[LevelRow]] = {}
    for r in rows:
        if r.completed > 0 and r.request_throughput > 0:
            groups.setdefault(r.load, []).append(r)
    out: list[Point] = []
    for load in sorted(groups):
        g = groups[load]
        p99: dict[str, float] = {}
        ci: dict[str, tuple[float, float]] = {}
        spread: dict[str, float] = {}
        for m in METRICS:
            vals = [v for r in g if (v := r.p99(m)) is not None and v > 0]
            if not vals:
                continue
            p99[m] = _median(vals)
            if len(vals) >= 2:
                spread[m] = (max(vals) - min(vals)) / p99[m]
            cis = [r.p99_ci[m] for r in g if m in r.p99_ci]
            if cis:
                ci[m] = (min(c[0] for c in cis), max(c[1] for c in cis))
        out.append(
            Point(
                label=g[0].label,
                load=load,
                throughput=float(np.mean([r.request_throughput for r in g])),
                output_throughput=float(np.mean([r.output_throughput for r in g])),
                p99=p99,
                ci=ci,
                spread=spread,
                mean_e2e_ms=_mean_opt([r.e2el_mean for r in g]),
                server_running=_mean_opt([r.server.running_mean if r.server else None for r in g]),
                client_concurrency=_mean_opt([r.client_mean_concurrency for r in g]),
                client_behind=any(r.client_behind for r in g),
            )
        )
    return out


def pav_increasing(y: Sequence[float]) -> np.ndarray:
    """Least-squares non-decreasing fit (pool adjacent violators, equal weights)."""
    sums: list[float] = []
    counts: list[int] = []
    for v in y:
        sums.append(float(v))
        counts.append(1)
        while len(sums) > 1 and sums[-2] / counts[-2] > sums[-1] / counts[-1]:
            s, c = sums.pop(), counts.pop()
            sums[-1] += s
            counts[-1] += c
    out: list[float] = []
    for s, c in zip(sums, counts, strict=True):
        out.extend([s / c] * c)
    return np.array(out)
