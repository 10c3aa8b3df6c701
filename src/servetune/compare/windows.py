"""One run cut into equal time windows: what each window holds, for the block bootstrap and
the block comparisons.

The measured window is the summary's (warm-up and cool-down excluded; membership as
:func:`servetune.metrics.summary.summarize` decides it: a request counts when it was scheduled
inside the window and, if it succeeded, ended inside it). It is cut into ``n`` windows of equal
length from its start; two runs that are compared share the window length, so that window
``w`` of each covers the same seconds after the start (the shorter run's last windows are
empty, and a rate counts only the seconds a window lies inside its run's measured window).
A request's latencies belong to the window it arrived in (when the concurrency limiter
released it: its planned time without a cap); a completion (and its tokens)
to the window its last token arrived in; a server scrape to the window of its time.
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
    active: np.ndarray = field(default_factory=lambda: np.zeros(0))
    """Seconds of each window that lie inside the measured window (rates divide by them)."""
    decode_s: float = 0.0
    """Median time a measured request spent decoding (first to last token): how long a
    request shares the server's batch with the ones that arrive after it."""

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


def window_count(requests: int) -> int:
    return int(min(MAX_WINDOWS, max(MIN_WINDOWS, requests // REQUESTS_PER_WINDOW)))


def measured_window(
    records: Sequence[RequestRecord], warmup_s: float, cooldown_s: float
) -> tuple[int, int]:
    """(start, end) of the measured window in ns on the run clock, as ``summarize`` sets it."""
    start = int(warmup_s * NS)
    if not records:
        return start, start
    last_end = max(r.end_ns for r in records)
    return start, max(start, last_end - int(cooldown_s * NS))


def build_windows(
    records: Sequence[RequestRecord],
    samples: Sequence[ServerSample],
    warmup_s: float,
    cooldown_s: float,
    slo: Slo | None,
    n_windows: int | None = None,
    width_s: float | None = None,
) -> WindowedRun:
    """Cut one run into windows (see the module docstring); ``width_s``: the windows' length
    (default: the measured window / ``n_windows``)."""
    if not records:
        return WindowedRun(n=1, width_s=0.0, start_s=0.0, end_s=0.0, active=np.zeros(1))
    start, end = measured_window(records, warmup_s, cooldown_s)
    inside = [r for r in records if start <= r.scheduled_ns <= end]
    ok = [r for r in inside if r.ok and r.last_ns is not None and r.last_ns <= end]
    failed = [r for r in inside if r.status == "failed"]
    n = n_windows or window_count(len(ok) + len(failed))
    span = max(end - start, 1)
    width_ns = width_s * NS if width_s else span / n
    edges = start + width_ns * np.arange(n + 1)
    active = np.clip(np.minimum(edges[1:], end) - edges[:-1], 0.0, None) / NS

    def win(t_ns: int) -> int:
        return min(n - 1, max(0, int((t_ns - start) / width_ns)))

    out = WindowedRun(
        n=n,
        width_s=width_ns / NS,
        start_s=start / NS,
        end_s=end / NS,
        requests=len(ok) + len(failed),
        active=active,
    )
    # a request arrives when the concurrency limiter lets it go (its plan time without a cap;
    # in a closed loop every request is planned at 0 and goes when a slot frees)
    sched = [win(r.eligible_ns) for r in ok]
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

    # Completions and tokens are spread over the time their work took (a request over its
    # life from send to last token; its output tokens over its decode, from the first to the
    # last token; its prompt at the first token): the server did the work then, and with
    # equal lengths completions come in waves that would make every window's count a coin
    # toss. Each window still adds up to the run's totals.
    send = np.array([r.send_ns for r in ok], dtype=float)
    first = np.array([r.first_ns if r.first_ns is not None else r.end_ns for r in ok], float)
    last = np.array([r.last_ns if r.last_ns is not None else r.end_ns for r in ok], float)
    outs = np.array([float(r.output_tokens or 0) for r in ok])
    ins = np.array([float(r.planned_input_len) for r in ok])
    edges = start + width_ns * np.arange(n + 1)
    life = spread(send, last, edges)
    decode = spread(first, last, edges)
    prompt = spread(first, first, edges)
    out.sums["completed"] = life.sum(axis=0) if len(ok) else np.zeros(n)
    out.sums["output_tokens"] = outs @ decode if len(ok) else np.zeros(n)
    out.sums["total_tokens"] = (outs @ decode + ins @ prompt) if len(ok) else np.zeros(n)
    if slo is not None and not slo.is_empty():
        good = np.array([1.0 if meets_slo(r, slo) else 0.0 for r in ok])
        out.sums["good"] = good @ life if len(ok) else np.zeros(n)
    out.sums["failed"] = sums([(win(r.eligible_ns), 1.0) for r in failed])
    out.decode_s = float(np.median(last - first)) / NS if len(ok) else 0.0
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


def spread(t0: np.ndarray, t1: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """(requests × windows) share of each interval [t0, t1] that falls in each window between
    ``edges`` (a point interval goes whole to its window); each row sums to 1."""
    if t0.size == 0:
        return np.zeros((0, edges.size - 1))
    span = np.maximum(t1 - t0, 0.0)
    point = span <= 0
    safe = np.where(point, 1.0, span)
    cum = np.clip((edges[None, :] - t0[:, None]) / safe[:, None], 0.0, 1.0)
    # a point: all of it at the first edge at or after it (right-closed windows)
    cum = np.where(point[:, None], (edges[None, :] >= t0[:, None]).astype(float), cum)
    # whatever lies before the first edge or after the last counts in the first or last window
    cum[:, 0] = 0.0
    cum[:, -1] = 1.0
    out: np.ndarray = np.diff(cum, axis=1)
    return out


def common_width(runs: Sequence[tuple[Sequence[RequestRecord], float, float]], n: int) -> float:
    """The window length that cuts the longest of RUNS (records, warm-up, cool-down) into
    ``n`` windows."""
    spans = [(e - s) / NS for s, e in (measured_window(r, w, c) for r, w, c in runs)]
    return max(max(spans, default=0.0), 1e-9) / n
