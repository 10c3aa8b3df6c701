"""Could the client keep the rate it claims? Send lag and achieved vs planned rate."""

from __future__ import annotations

import math
from collections.abc import Sequence

from servetune.loadgen.live import Snapshot
from servetune.loadgen.progress import RATE_FLOOR, behind_reason
from servetune.metrics.stats import describe
from servetune.results.record import RequestRecord
from servetune.results.schema import ClientHealth


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


def note_stamps(health: ClientHealth, finals: Sequence[Snapshot]) -> None:
    """Record who stamped the arrivals: the kernel, the client's loop, or both."""
    kernel = sum(s.kernel_stamped_reads for s in finals)
    user = sum(s.user_stamped_reads for s in finals)
    if kernel + user == 0:
        return
    health.kernel_stamped_share = kernel / (kernel + user)
    # A handful of user-stamped reads (the kernel turning stamping on) is still "kernel".
    if user <= max(2, 0.001 * (kernel + user)):
        health.arrival_stamps = "kernel"
    elif kernel == 0:
        health.arrival_stamps = "user"
    else:
        health.arrival_stamps = "mixed"
