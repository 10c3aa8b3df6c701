"""Who stamped a run's response arrivals, from the workers' final counters."""

from __future__ import annotations

from collections.abc import Sequence

from servetune.loadgen.live import Snapshot
from servetune.results.schema import ClientHealth


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
