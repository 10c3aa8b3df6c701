"""From one level's run directory to its row of the curve (client figures + server means)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from servetune.metrics.prefix_check import check_prefix_cache
from servetune.results import server_series as ss
from servetune.results.io import read_server_series
from servetune.results.schema import RunResult
from servetune.results.sweep_schema import LevelRow, PlannedLevel, ServerMeans

FAILED_SHARE_WARN = 0.05


def _window(samples: Sequence[ss.ServerSample], start: float, end: float) -> list[ss.ServerSample]:
    inside = [s for s in samples if start <= s.t <= end]
    # A short level may fit between two scrapes: then use whatever overlaps most closely.
    return inside if inside else list(samples)


def _values(samples: Sequence[ss.ServerSample], concept: str) -> np.ndarray:
    return np.array([s.values[concept] for s in samples if concept in s.values], dtype=float)


def server_means(
    samples: Sequence[ss.ServerSample], start: float, end: float
) -> ServerMeans | None:
    """Means of the server's gauges and the preemption rate over [start, end] (run seconds)."""
    if not samples:
        return None
    win = _window(samples, start, end)
    out = ServerMeans(samples=len(win))
    kv = _values(win, ss.KV_CACHE_USAGE)
    if kv.size:
        out.kv_cache_usage_mean, out.kv_cache_usage_max = float(kv.mean()), float(kv.max())
    run = _values(win, ss.RUNNING)
    if run.size:
        out.running_mean, out.running_max = float(run.mean()), float(run.max())
    wait = _values(win, ss.WAITING)
    if wait.size:
        out.waiting_mean, out.waiting_max = float(wait.mean()), float(wait.max())
    gpu = _values(win, ss.GPU_UTILIZATION)
    if gpu.size:
        out.gpu_utilization_mean = float(gpu.mean())
    pre = [(s.t, s.values[ss.PREEMPTIONS_TOTAL]) for s in win if ss.PREEMPTIONS_TOTAL in s.values]
    if len(pre) >= 2:
        dt = pre[-1][0] - pre[0][0]
        # A counter that went down means the server restarted: count from the restart.
        count = pre[-1][1] - pre[0][1] if pre[-1][1] >= pre[0][1] else pre[-1][1]
        out.preemptions = float(count)
        out.preemptions_per_s = float(count / dt) if dt > 0 else None
    return out


def row_from_run(
    level: PlannedLevel, level_dir: Path, sweep_dir: Path, result: RunResult
) -> LevelRow:
    """The curve row of one finished level (reads its server series from disk)."""
    s = result.summary
    cfg = result.config
    health = result.client_health
    try:
        rel = str(level_dir.relative_to(sweep_dir))
    except ValueError:
        rel = str(level_dir)
    warnings: list[str] = []
    f = result.failures
    if f is not None and f.over:
        warnings.append(
            f"{result.status}: {f.verdict}; left out of the knee and the SLO-max (its latencies "
            "describe only the requests that succeeded)"
        )
    elif f is None:  # a run.json written before the verdict existed
        total = s.completed + s.failed
        if total and s.failed / total > FAILED_SHARE_WARN:
            warnings.append(
                f"{s.failed} of {total} requests failed ({s.failed / total:.0%}); its latencies "
                "describe only the successes"
            )
    if result.status == "cut_short":
        warnings.append("cut short (the sweep was killed while this level ran): left out")
    if s.completed == 0 and (f is None or not f.over):
        warnings.append("no request completed inside the measured window")
    if health.behind:
        warnings.append(
            "the client fell behind its schedule (send lag or achieved rate): the offered load "
            "was lower than planned"
        )
    ci: dict[str, tuple[float, float]] = {}
    for name in ("ttft", "tpot", "e2el"):
        interval = getattr(s, name).p99_ci
        if interval is not None:
            ci[name] = (float(interval[0]), float(interval[1]))
    samples = read_server_series(level_dir)
    means = server_means(samples, s.window_start_s, s.window_end_s) if samples else None
    cache = check_prefix_cache(result)
    if cache is not None:
        means = means or ServerMeans()
        means.prefix_cache_hit_rate = cache.measured
        if cache.flagged:
            warnings.append(cache.message())
    rate = cfg.request_rate
    return LevelRow(
        label=level.label,
        role=level.role,
        level_dir=rel,
        mode=level.mode,
        offered_rate=rate if level.mode == "rate" or not math.isinf(rate) else None,
        concurrency=cfg.max_concurrency,
        status=result.status,
        completed=s.completed,
        failed=s.failed,
        failure_share=f.share if f is not None else None,
        error_classes=dict(f.classes) if f is not None else dict(s.error_classes),
        short_outputs=s.short_outputs,
        duration_s=s.duration_s,
        achieved_send_rate=health.achieved_rate,
        request_throughput=s.request_throughput,
        output_throughput=s.output_throughput,
        total_token_throughput=s.total_token_throughput,
        request_goodput=s.request_goodput,
        ttft_p50=s.ttft.p50,
        ttft_p99=s.ttft.p99,
        tpot_p50=s.tpot.p50,
        tpot_p99=s.tpot.p99,
        e2el_p50=s.e2el.p50,
        e2el_p99=s.e2el.p99,
        e2el_mean=s.e2el.mean,
        itl_p99=s.itl.p99,
        p99_ci=ci,
        client_mean_concurrency=s.mean_concurrency,
        send_lag_p99=health.send_lag.p99,
        client_behind=health.behind,
        server=means,
        prefix_cache_hit_rate_ceiling=cache.ceiling if cache else None,
        prefix_cache_flagged=bool(cache and cache.flagged),
        warnings=warnings,
    )
