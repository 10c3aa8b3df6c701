"""Live counters of one load-generating loop, cheap to update and to ship to the parent."""

from __future__ import annotations

from collections import deque

from pydantic import BaseModel

_LAG_WINDOW = 512


class LiveStats:
    """Counters updated on the hot path (plain attributes; no locks: one loop owns them)."""

    __slots__ = ("cancelled", "done", "failed", "inflight", "lags_ns", "sent")

    def __init__(self) -> None:
        self.sent = 0
        self.done = 0
        self.failed = 0
        self.cancelled = 0
        self.inflight = 0
        self.lags_ns: deque[int] = deque(maxlen=_LAG_WINDOW)

    def snapshot(self, worker: int) -> Snapshot:
        lags = sorted(self.lags_ns)
        p99 = lags[min(len(lags) - 1, int(0.99 * len(lags)))] / 1e6 if lags else 0.0
        return Snapshot(
            worker=worker,
            sent=self.sent,
            done=self.done,
            failed=self.failed,
            cancelled=self.cancelled,
            inflight=self.inflight,
            lag_p99_ms=p99,
        )


class Snapshot(BaseModel):
    """What a worker reports to the parent a few times a second."""

    worker: int
    sent: int
    done: int
    failed: int
    cancelled: int
    inflight: int
    lag_p99_ms: float
    """p99 send lag over the worker's last 512 sends."""
    cpu_s: float = 0.0
    """CPU seconds the worker process used since the run started (final snapshot)."""
    kernel_stamped_reads: int = 0
    """Response reads stamped with the kernel's arrival time (final snapshot)."""
    user_stamped_reads: int = 0
    """Response reads stamped when the client's loop got to them (final snapshot)."""
