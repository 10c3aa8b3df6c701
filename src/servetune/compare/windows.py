"""One run cut into equal time windows: what each window holds, for the block bootstrap.

The measured window is the summary's (warm-up and cool-down excluded; membership as
:func:`servetune.metrics.summary.summarize` decides it: a request counts when it was scheduled
inside the window and, if it succeeded, ended inside it). It is cut into ``n`` windows of equal
length. A request's latencies belong to the window it was scheduled in; a completion (and its
tokens) to the window its last token arrived in; a server scrape to the window of its time.
Resampling whole windows (in blocks) keeps requests that shared the server's state together.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from servetune.metrics.server_summary import counter_increase
from servetune.metrics.summary import meets_slo
from servetune.results import server_series as ss
from servetune.results.record import RequestRecord
from servetune.results.schema import Slo
from servetune.results.server_series import ServerSample

NS = 1_000_000_000
MIN_WINDOWS = 8
MAX_WINDOWS = 600
REQUESTS_PER_WINDOW = 4
GAUGES = (ss.KV_CACHE_USAGE, ss.RUNNING, ss.WAITING, ss.GPU_UTILIZATION)


@dataclass
class ValueSet:
    """Values sorted ascending, with the window each came from."""

    values: np.ndarray
    window: np.ndarray

    @classmethod
    def build(cls, values: Sequence[float], windows: Sequence[int]) -> ValueSet:
        v = np.asarray(values, dtype=float)
        w = np.asarray(windows, dtype=np.int64)
        order = np.argsort(v, kind="stable")
        return cls(v[order], w[order])

    @property
    def size(self) -> int:
        return int(self.values.size)


@dataclass
class WindowedRun:
    """A run's measured window as ``n`` windows of ``width_s`` seconds."""

    n: int
    width_s: float
    start_s: float
    end_s: float
    sets: dict[str, ValueSet] = field(default_factory=dict)
    sums: dict[str, np.ndarray] = field(default_factory=dict)
    gauges: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    """concept → (sum of readings, number of readings) per window."""
    requests: int = 0

    @property
    def duration_s(self) -> float:
        return self.n * self.width_s


def window_count(requests: int) -> int:
    return int(min(MAX_WINDOWS, max(MIN_WINDOWS, requests // REQUESTS_PER_WINDOW)))


def build_windows(
    records: Sequence[RequestRecord],
    samples: Sequence[ServerSample],
    warmup_s: float,
    cooldown_s: float,
    slo: Slo | None,
    n_windows: int | None = None,
) -> WindowedRun:
    """Cut one run into windows (see the module docstring)."""
    if not records:
        return WindowedRun(n=1, width_s=0.0, start_s=0.0, end_s=0.0)
    start = int(warmup_s * NS)
    last_end = max(r.end_ns for r in records)
    end = max(start, last_end - int(cooldown_s * NS))
    inside = [r for r in records if start <= r.scheduled_ns <= end]
    ok = [r for r in inside if r.ok and r.last_ns is not None and r.last_ns <= end]
    failed = [r for r in inside if r.status == "failed"]
    n = n_windows or window_count(len(ok) + len(failed))
    span = max(end - start, 1)
    width_ns = span / n

    def win(t_ns: int) -> int:
        return min(n - 1, max(0, int((t_ns - start) / width_ns)))

    out = WindowedRun(
        n=n,
        width_s=width_ns / NS,
        start_s=start / NS,
        end_s=end / NS,
        requests=len(ok) + len(failed),
    )
    sched = [win(r.scheduled_ns) for r in ok]
    out.sets["ttft"] = ValueSet.build(
        [r.ttft_ms for r in ok if r.ttft_ms is not None],
        [w for r, w in zip(ok, sched, strict=True) if r.ttft_ms is not None],
    )
    tpot_pairs = [(t, w) for r, w in zip(ok, sched, strict=True) if (t := r.tpot_ms) is not None]
    out.sets["tpot"] = ValueSet.build([t for t, _ in tpot_pairs], [w for _, w in tpot_pairs])
    out.sets["e2el"] = ValueSet.build(
        [r.e2e_ms for r in ok if r.e2e_ms is not None],
        [w for r, w in zip(ok, sched, strict=True) if r.e2e_ms is not None],
    )
    itl_v: list[float] = []
    itl_w: list[int] = []
    for r, w in zip(ok, sched, strict=True):
        gaps = r.itl_ms()
        itl_v.extend(gaps)
        itl_w.extend([w] * len(gaps))
    out.sets["itl"] = ValueSet.build(itl_v, itl_w)

    def sums(pairs: Sequence[tuple[int, float]]) -> np.ndarray:
        acc = np.zeros(n)
        for w, v in pairs:
            acc[w] += v
        return acc

    done = [win(r.last_ns or r.end_ns) for r in ok]
    out.sums["completed"] = sums([(w, 1.0) for w in done])
    out.sums["output_tokens"] = sums(
        [(w, float(r.output_tokens or 0)) for r, w in zip(ok, done, strict=True)]
    )
    out.sums["total_tokens"] = sums(
        [
            (w, float((r.output_tokens or 0) + r.planned_input_len))
            for r, w in zip(ok, done, strict=True)
        ]
    )
    if slo is not None and not slo.is_empty():
        out.sums["good"] = sums(
            [(w, 1.0) for r, w in zip(ok, done, strict=True) if meets_slo(r, slo)]
        )
    out.sums["failed"] = sums([(win(r.scheduled_ns), 1.0) for r in failed])
    _add_server(out, samples, start / NS, end / NS, width_ns / NS)
    return out


def _add_server(
    out: WindowedRun, samples: Sequence[ServerSample], start: float, end: float, width: float
) -> None:
    ordered = sorted(samples, key=lambda s: s.t)
    if not ordered or width <= 0:
        return

    def win(t: float) -> int:
        return min(out.n - 1, max(0, int((t - start) / width)))

    for concept in GAUGES:
        total = np.zeros(out.n)
        count = np.zeros(out.n)
        for s in ordered:
            v = s.values.get(concept)
            if v is None or not (start <= s.t <= end) or not math.isfinite(v):
                continue
            w = win(s.t)
            total[w] += v
            count[w] += 1
        if count.sum() > 0:
            out.gauges[concept] = (total, count)
    having = [s for s in ordered if ss.PREEMPTIONS_TOTAL in s.values]
    if len(having) >= 2:
        acc = np.zeros(out.n)
        for prev, cur in itertools.pairwise(having):
            if start < cur.t <= end:
                acc[win(cur.t)] += counter_increase(
                    [prev.values[ss.PREEMPTIONS_TOTAL], cur.values[ss.PREEMPTIONS_TOTAL]]
                )
        out.sums["preemptions"] = acc


def has_figure(run: WindowedRun, source: str, kind: str) -> bool:
    """Whether the run recorded what a figure of this kind and source needs."""
    if kind in ("pct", "mean"):
        vs = run.sets.get(source)
        return vs is not None and vs.size > 0
    if kind in ("rate", "count"):
        return source in run.sums
    return source in run.gauges
