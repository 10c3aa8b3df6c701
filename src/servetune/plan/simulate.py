"""One configuration at one request rate on the simulated engine: the adapter.

The only place the planner touches the simulator: ``sim.offline_run.OfflineRun`` on a plan of the
planner's own requests, with a scrape that keeps only KV use and running (``_LeanRun``).
``sim.offline.simulate`` (the simulator's public entry point) is not used on purpose: it
returns a RunResult without the per-request records the planner's overload test reads (the
in-flight growth), takes its workload from a BenchConfig (a run's measured lengths are not
one) and computes bootstrap intervals the planner does not need — 1.3–2× the time per point
(measured side by side: 0.29–0.40 s against 0.19–0.23 s for 1,000 requests), which the 60 s
budget for ≥ 100 candidates cannot spare. If the simulator's internals change, this module is
what follows them.

A point's latencies are measured as ``bench`` would: per request from its send, percentiles
over the requests sent after the first 10% of the sending span (the server starts empty, so
the first requests see no queue), linear interpolation (numpy's default).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel

from servetune.arch.memory import MemoryPlan
from servetune.metrics.timeline import in_flight, slope
from servetune.plan.workload import Workload, offsets_at
from servetune.results.record import RequestRecord
from servetune.results.schema import BenchConfig
from servetune.sim.offline_run import OfflineRun
from servetune.sim.resolved import ResolvedConfig
from servetune.workload.plan import Plan

WARMUP_SHARE = 0.1
COOLDOWN_SHARE = 0.1


class Point(BaseModel):
    """What the simulated engine did at one offered rate."""

    rate: float
    requests: int
    completed: int
    failed: int
    duration_s: float
    request_throughput: float
    input_tok_s: float
    output_tok_s: float
    ttft_p50_ms: float | None = None
    ttft_p99_ms: float | None = None
    tpot_p50_ms: float | None = None
    tpot_p99_ms: float | None = None
    e2el_p50_ms: float | None = None
    e2el_p99_ms: float | None = None
    kv_cache_usage_mean: float | None = None
    running_mean: float | None = None
    preemptions: int = 0
    prefix_cache_hit_rate: float | None = None
    """Prompt tokens the engines' prefix caches served ÷ those they were asked for."""
    inflight_growth_late_share: float | None = None
    """Growth of the requests in flight over the second half of the sending period, as a
    share of the offered rate: ≈ 0 for a replica that keeps up, ≥ 0.15 for one past its
    capacity (the planner's test, :data:`servetune.plan.capacity.LATE_GROWTH`)."""
    session_lifetime_s: float | None = None
    """Session traffic (a fleet's): the median first send → last answer of its complete
    sessions (the next simulation's first guess of how long to simulate)."""

    def p99(self, metric: str) -> float | None:
        value: float | None = getattr(self, f"{metric}_p99_ms")
        return value


class _Discard:
    """A samples sink that keeps nothing (what the run needs is kept by :class:`_LeanRun`)."""

    def write(self, data: bytes) -> None:
        pass

    def close(self) -> None:
        pass


class _LeanRun(OfflineRun):
    """The offline run with a scrape that keeps only what a plan reads (KV use, running):
    the full scrape (histogram snapshots) is a third of a run's time."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lean: list[tuple[float, float, float]] = []

    def _scrape(self, t: float) -> bytes:
        self.lean.append((t, self.eng.pool.usage, float(self.eng.num_running)))
        return b""


def _pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(np.array(values), q)) if values else None


def _late_growth(sends: np.ndarray, ends: np.ndarray, rate: float) -> float | None:
    """In-flight growth (req/s) over the second half of the sending period ÷ the rate.

    The same figure as diagnose's ``inflight_growth_late_share`` (diagnose/figures/client.py, from a
    run's records; diagnose/window.py, from a window of a run) on the same primitives
    (:func:`servetune.metrics.timeline.in_flight`, :func:`~servetune.metrics.timeline.slope`),
    sampled on 40 points of the second half; the offered rate is the plan's, not measured."""
    if math.isinf(rate) or sends.size < 20:
        return None
    t0, t1 = float(sends[0]), float(sends[-1])
    if t1 - t0 <= 0:
        return None
    ts = np.linspace((t0 + t1) / 2, t1, 40)
    return slope(ts, in_flight(sends, ends, ts)) / rate


def simulate(r: ResolvedConfig, mem: MemoryPlan, w: Workload, rate: float, n: int) -> Point:
    """Run ``n`` requests of ``w`` at ``rate`` req/s (inf: all at once) on a fresh engine."""
    n = min(n, len(w.specs))
    plan = Plan(requests=w.specs[:n], offsets_ns=offsets_at(w, rate, n))
    cfg = BenchConfig(request_rate=rate, num_prompts=n)
    sim = _LeanRun(plan, cfg, r, mem, samples_out=_Discard(), token_times=False)
    sim.run()
    pool = sim.eng.pool
    return measure(
        sim.records,
        plan.offsets_ns[-1] if plan.offsets_ns else 0,
        rate,
        sim.lean,
        sim.eng.counters.preemptions,
        pool.hits / pool.queries if pool.queries else None,
    )


def measure(
    recs: Sequence[RequestRecord],
    span: int,
    rate: float,
    samples: Sequence[tuple[float, float, float]],
    preemptions: int,
    hit_rate: float | None = None,
    warmup_ns: int = 0,
) -> Point:
    """A point from a run's records: the requests scheduled in the middle of the sending span
    ``span`` (ns: the last planned send; a session workload's, the last session's start) —
    after its first 10% or ``warmup_ns`` (a session workload's: until the sessions live at
    once stop growing), before its last 10%; ``samples`` (t, KV use, running) of the
    engine(s) over the run."""
    ok = [x for x in recs if x.ok and x.first_ns is not None and x.last_ns is not None]
    start = max(int(span * WARMUP_SHARE), warmup_ns) if not math.isinf(rate) else 0
    stop = span - int(span * COOLDOWN_SHARE) if not math.isinf(rate) else span
    measured = [x for x in ok if start <= x.scheduled_ns <= stop]
    t0 = min((x.send_ns for x in measured), default=0)
    t1 = max((x.last_ns or 0 for x in measured), default=0)
    dur = max(1e-9, (t1 - t0) / 1e9)
    ttft = [(x.first_ns - x.send_ns) / 1e6 for x in measured]  # type: ignore[operator]
    e2e = [(x.last_ns - x.send_ns) / 1e6 for x in measured]  # type: ignore[operator]
    tpot = [
        (x.last_ns - x.first_ns) / 1e6 / (x.output_tokens - 1)  # type: ignore[operator]
        for x in measured
        if (x.output_tokens or 0) > 1
    ]
    in_tok = sum(x.planned_input_len for x in measured)
    out_tok = sum(x.output_tokens or 0 for x in measured)
    in_window = [x for x in samples if t0 / 1e9 <= x[0] <= t1 / 1e9] or list(samples)
    kv = [x[1] for x in in_window]
    running = [x[2] for x in in_window]
    # in flight while requests arrive on the plan (a session's later turns go on after the
    # last session started, and the in-flight count falls as the sessions end)
    sent = recs if not warmup_ns else [x for x in recs if x.scheduled_ns >= start]
    sent = [x for x in sent if x.scheduled_ns <= span]
    sends = np.sort(np.array([x.send_ns for x in sent], dtype=float) / 1e9)
    ends = np.sort(np.array([x.end_ns for x in sent], dtype=float) / 1e9)
    return Point(
        rate=rate,
        requests=len(recs),
        completed=len(ok),
        failed=sum(1 for x in recs if x.status == "failed"),
        duration_s=dur,
        request_throughput=len(measured) / dur,
        input_tok_s=in_tok / dur,
        output_tok_s=out_tok / dur,
        ttft_p50_ms=_pct(ttft, 50),
        ttft_p99_ms=_pct(ttft, 99),
        tpot_p50_ms=_pct(tpot, 50),
        tpot_p99_ms=_pct(tpot, 99),
        e2el_p50_ms=_pct(e2e, 50),
        e2el_p99_ms=_pct(e2e, 99),
        kv_cache_usage_mean=float(np.mean(kv)) if kv else None,
        running_mean=float(np.mean(running)) if running else None,
        preemptions=preemptions,
        inflight_growth_late_share=_late_growth(sends, ends, rate),
        prefix_cache_hit_rate=hit_rate,
    )
