"""Could the client keep the rate it claimed? Send lag and achieved vs planned rate, judged
from the records (the end of a run, a run rebuilt from its records, a simulated run) and,
live, from the workers' counters (:mod:`servetune.loadgen.progress`)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from servetune.metrics.stats import describe
from servetune.results.record import RequestRecord
from servetune.results.schema import ClientHealth

LAG_LIMIT_MS = 5.0
"""A p99 send lag above this means the client fell behind its schedule."""
RATE_FLOOR = 0.97
"""An achieved rate below this share of the planned one means the client fell behind."""


def behind_reason(lag_p99_ms: float, achieved: float | None, planned: float | None) -> str | None:
    """Why the client cannot keep its plan, or None when it can."""
    if lag_p99_ms > LAG_LIMIT_MS:
        return f"CLIENT BEHIND: p99 send lag {lag_p99_ms:.1f} ms > {LAG_LIMIT_MS:g} ms"
    if achieved is not None and planned and achieved < RATE_FLOOR * planned:
        return (
            f"CLIENT BEHIND: achieved {achieved:.1f} req/s < {RATE_FLOOR:.0%} of planned "
            f"{planned:.1f} req/s"
        )
    return None


def client_health(
    records: Sequence[RequestRecord],
    target_rate: float,
    max_concurrency: int | None,
    workers: int,
) -> ClientHealth:
    """Judge the client's own timing from what it recorded."""
    lags = [r.send_lag_ms for r in records]
    delays = [r.queue_delay_ms for r in records]
    health = ClientHealth(
        target_rate=None if math.isinf(target_rate) else target_rate,
        send_lag=describe(lags),
        queue_delay=describe(delays),
        workers=workers,
    )
    sends = sorted(r.send_ns for r in records)
    planned = None
    if len(sends) > 1 and not math.isinf(target_rate):
        span_sched = max(r.scheduled_ns for r in records) - min(r.scheduled_ns for r in records)
        span_sent = sends[-1] - sends[0]
        if span_sent > 0:
            health.achieved_rate = (len(sends) - 1) / (span_sent / 1e9)
        if span_sched > 0:
            planned = (len(sends) - 1) / (span_sched / 1e9)
            health.planned_rate = planned
    lag_p99 = health.send_lag.p99 or 0.0
    # Under a concurrency cap a lower achieved rate is the cap's doing, not the client's.
    reason = behind_reason(lag_p99, None if max_concurrency else health.achieved_rate, planned)
    if reason:
        health.behind = True
        health.warnings.append(
            reason + ": latencies from this run understate what users would see; "
            "raise --workers or lower the rate"
        )
    elif (
        max_concurrency
        and planned
        and health.achieved_rate is not None
        and (health.achieved_rate < RATE_FLOOR * planned)
    ):
        health.warnings.append(
            f"the concurrency cap ({max_concurrency}) held the rate to "
            f"{health.achieved_rate:.1f} req/s of the {planned:.1f} planned"
        )
    return health
