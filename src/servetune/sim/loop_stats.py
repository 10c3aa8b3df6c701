"""How late the real-time server is, and where the lateness comes from (``/sim/stats``).

The simulator's own lateness is its **emission lag**: a token's write time minus the end of
the simulated step that produced it. Beside it, per step: how long the step's writes took and
how many there were, how late the loop thread (and the fan-out writer's helper thread, when
there is one) woke after the step's end; the longest time seen per phase of the engine loop
(step and build, sleeps, parsing, garbage collections), and the collections that ran while
serving. Percentiles are :func:`servetune.metrics.stats.describe`'s (linear interpolation).
Samples are kept up to :data:`MAX_SAMPLES` each; the lag histogram (``/metrics``) counts all.
"""

from __future__ import annotations

import gc
import time
from array import array
from typing import Any

import numpy as np

from servetune.metrics.stats import describe
from servetune.sim.hist import LAG_BUCKETS, Hist

MAX_SAMPLES = 2_000_000


class LoopStats:
    """The real-time loop's figures; :meth:`watch_gc` / :meth:`unwatch_gc` bracket serving."""

    def __init__(self) -> None:
        self.lag = Hist(LAG_BUCKETS)
        """Emission lag (seconds), every token."""
        self.lag_samples = array("d")
        self.worst: dict[str, float] = {}
        """The longest time seen per phase of the engine loop (seconds)."""
        self.gc_stats: dict[int, tuple[int, float]] = {}
        """Collections during service, per generation: (count, seconds)."""
        self.idle_gc = False
        """Set while the loop collects on purpose (idle): not counted."""
        self._gc_t = 0.0
        self.writes = 0
        self.write_s = 0.0
        self.batch_s = array("d")
        self.batch_n = array("l")
        """Per step: how long its writes took, and how many."""
        self.wake_lag_s = 0.0
        self.wake_s = array("d")
        """Per step: the loop thread's wake-up after the step's end."""
        self.side_wake_s = array("d")
        """Per step split over two threads: the helper's wake-up after the step's end."""
        self.batches = 0

    # -- collecting -----------------------------------------------------------------------
    def phase(self, what: str, seconds: float) -> None:
        if seconds > self.worst.get(what, 0.0):
            self.worst[what] = seconds

    def watch_gc(self) -> None:
        gc.callbacks.append(self._gc_pause)

    def unwatch_gc(self) -> None:
        if self._gc_pause in gc.callbacks:
            gc.callbacks.remove(self._gc_pause)

    def _gc_pause(self, phase: str, info: dict[str, int]) -> None:
        if self.idle_gc:
            return
        if phase == "start":
            self._gc_t = time.perf_counter()
        else:
            gen = info.get("generation", 0)
            took = time.perf_counter() - self._gc_t
            self.phase(f"gc_gen{gen}", took)
            n, total = self.gc_stats.get(gen, (0, 0.0))
            self.gc_stats[gen] = (n + 1, total + took)

    def step_written(
        self,
        stamps: array[float],
        target: float,
        t_start: float,
        first: float,
        side_start: float | None,
    ) -> None:
        """A step's writes: their times, the step's end, when the loop thread began writing,
        when the first write began (either thread), when the helper began (None: no helper)."""
        took = (max(stamps) - first) if stamps else 0.0
        self.write_s += took
        if len(self.batch_s) < MAX_SAMPLES:
            self.batch_s.append(took)
            self.batch_n.append(len(stamps))
        self.writes += len(stamps)
        self.wake_lag_s += t_start - target
        if len(self.wake_s) < MAX_SAMPLES:
            self.wake_s.append(t_start - target)
        if side_start is not None and len(self.side_wake_s) < MAX_SAMPLES:
            self.side_wake_s.append(side_start - target)
        self.batches += 1
        lags = array("d", (x - target for x in stamps))
        observe = self.lag.observe
        for lag in lags:
            observe(lag)
        room = MAX_SAMPLES - len(self.lag_samples)
        if room > 0:
            self.lag_samples.extend(lags[:room])

    # -- reporting ------------------------------------------------------------------------
    def report(self) -> dict[str, Any]:
        n = self.batches
        return {
            "emission_lag_ms": _pcts(self.lag_samples, 1e3, empty_count=True),
            "write_us_per_token": self.write_s / self.writes * 1e6 if self.writes else None,
            "write_batch_ms": _pcts(self.batch_s, 1e3),
            "write_batch_size": _pcts(self.batch_n, 1.0),
            "wake_lag_ms_mean": self.wake_lag_s / n * 1e3 if n else None,
            "wake_lag_ms": _pcts(self.wake_s, 1e3),
            "helper_wake_lag_ms": _pcts(self.side_wake_s, 1e3),
            "tokens_per_step_written": self.writes / n if n else None,
            "worst_ms": {k: v * 1e3 for k, v in sorted(self.worst.items())},
            "gc": {
                f"gen{g}": {"count": c, "total_ms": t * 1e3}
                for g, (c, t) in sorted(self.gc_stats.items())
            },
        }


def _pcts(xs: array[float] | array[int], scale: float, empty_count: bool = False) -> Any:
    """count / min / p50 / p90 / p99 / p99.9 / max of ``xs`` × ``scale`` (None when empty, or
    ``{"count": 0}`` and Nones with ``empty_count``)."""
    if not xs:
        if not empty_count:
            return None
        keys = ("min", "p50", "p90", "p99", "p999", "max")
        return {"count": 0, **dict.fromkeys(keys)}
    values = np.frombuffer(xs, dtype=xs.typecode).astype(np.float64) * scale
    st = describe(values, unit="", ci=False)
    return {
        "count": st.count,
        "min": st.min,
        "p50": st.p50,
        "p90": st.p90,
        "p99": st.p99,
        "p999": st.p999,
        "max": st.max,
    }
