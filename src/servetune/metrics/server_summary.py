"""Reduce a ServerSeries to the figures a person (and ``diagnose``) reads:
``RunResult.server.summary``.

Window: gauges use the samples whose ``t`` lies in [start, end]; counters and histograms use
the snapshots from the two that bracket it (the last at or before ``start``, the first at or
after ``end``), so the server's counts cover the whole client window — every step between them
added up, so that a reset (the server restarted) counts the new process from zero, as
Prometheus' ``increase`` does. With no window, the whole series. Scrapes are evenly spaced,
so "share of the window" is the share of samples.

Keys (absent when the server did not expose the concept):

========================== ===============================================================
kv_cache_usage_mean/p95/max  KV-cache use, 0–1
kv_share_below_50            share of the window with KV use < 0.5
kv_share_above_90            share of the window with KV use > 0.9
running_mean/max             requests the engine runs
waiting_mean/max             requests queued in the engine
waiting_slope_per_s          least-squares trend of ``waiting`` (requests per second); > 0
                             means the queue grows: the server is past its capacity
preemptions, preemptions_per_s
prompt_tokens_per_s, generation_tokens_per_s, requests_finished_per_s  server-side rates
requests_aborted             aborted requests in the window
prefix_cache_hit_rate        Δhits/Δqueries (vLLM V1) or the mean of the engine's gauge
gpu_utilization_mean/max, gpu_memory_used_bytes_max, gpu_memory_total_bytes
ttft_ms, tpot_ms, itl_ms, e2e_ms, queue_ms, prefill_ms, decode_ms
                             {count, mean, p50, p90, p95, p99} from the server's histograms
                             over the window (bucket-interpolated, see metrics.histograms),
                             and p50_bucket… = [lower, upper] of the bucket each lies in
                             (null = unbounded): how precise the percentile is
========================== ===============================================================

From the engine's cache configuration (vLLM's ``vllm:cache_config_info`` labels, read once by
the scraper: :func:`cache_config`):

========================== ===============================================================
kv_cache_blocks              KV blocks of the pool (``num_gpu_blocks``, summed over DP engines)
kv_block_size                tokens per block (``block_size``)
kv_cache_tokens              tokens the pool holds: blocks × block size (vLLM's "GPU KV cache
                             size")
gpu_memory_utilization       ``--gpu-memory-utilization``
kv_cache_dtype               ``--kv-cache-dtype`` (``cache_dtype``; ``auto`` = the model's)
========================== ===============================================================

From llama.cpp's ``/props`` (read once by the scraper, beside ``/metrics``):

========================== ===============================================================
max_num_seqs                 parallel slots (``-np``: requests decoded at once; ``total_slots``)
slot_context_tokens          context of one slot (``-c`` / ``-np``)
========================== ===============================================================
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np

from servetune.metrics import histograms as hg
from servetune.results import server_series as ss
from servetune.results.server_series import ServerSample

HISTOGRAM_KEYS = {
    ss.TTFT_SECONDS: "ttft_ms",
    ss.TPOT_SECONDS: "tpot_ms",
    ss.ITL_SECONDS: "itl_ms",
    ss.E2E_SECONDS: "e2e_ms",
    ss.QUEUE_SECONDS: "queue_ms",
    ss.PREFILL_SECONDS: "prefill_ms",
    ss.DECODE_SECONDS: "decode_ms",
}

GPU_GAUGES: tuple[tuple[str, str, Literal["mean", "max"]], ...] = (
    (ss.GPU_UTILIZATION, "gpu_utilization_mean", "mean"),
    (ss.GPU_UTILIZATION, "gpu_utilization_max", "max"),
    (ss.GPU_MEMORY_USED_BYTES, "gpu_memory_used_bytes_max", "max"),
    (ss.GPU_MEMORY_TOTAL_BYTES, "gpu_memory_total_bytes", "max"),
)
"""GPU gauge → the key of its figure and how the window reduces it."""


def _in_window(samples: Sequence[ServerSample], start: float, end: float) -> list[ServerSample]:
    return [s for s in samples if start <= s.t <= end]


def _bracket(
    samples: Sequence[ServerSample], start: float, end: float, concept: str, kind: str
) -> tuple[ServerSample, ServerSample] | None:
    """The snapshots around [start, end] that carry ``concept`` (kind: values / histograms)."""
    having = [s for s in samples if concept in getattr(s, kind)]
    if len(having) < 2:
        return None
    first = having[0]
    for s in having:
        if s.t <= start:
            first = s
        else:
            break
    last = having[-1]
    for s in having:
        if s.t >= end:
            last = s
            break
    if last.t <= first.t:
        return None
    return first, last


def counter_increase(values: Sequence[float]) -> float:
    """Increase of a cumulative counter over consecutive readings; a drop is a reset (the
    server restarted) and counts the new reading, as Prometheus' ``increase`` does."""
    total = 0.0
    for prev, cur in itertools.pairwise(values):
        total += cur - prev if cur >= prev else cur
    return total


def _counter_between(
    samples: Sequence[ServerSample], start: float, end: float, concept: str
) -> tuple[float, float] | None:
    """(increase, seconds) of counter ``concept`` over the bracketing snapshots."""
    br = _bracket(samples, start, end, concept, "values")
    if br is None:
        return None
    a, b = br
    vals = [s.values[concept] for s in samples if a.t <= s.t <= b.t and concept in s.values]
    return counter_increase(vals), b.t - a.t


def _gauge(window: Sequence[ServerSample], concept: str) -> np.ndarray:
    return np.array([s.values[concept] for s in window if concept in s.values], dtype=float)


def _slope(ts: np.ndarray, ys: np.ndarray) -> float | None:
    if len(ts) < 2 or float(np.ptp(ts)) <= 0:
        return None
    tc = ts - ts.mean()
    return float((tc * (ys - ys.mean())).sum() / (tc * tc).sum())


def _to_ms(key: str, v: float | list[float]) -> float | list[float | None] | None:
    """Seconds → ms; an infinite bucket bound becomes None (JSON has no infinity)."""
    if isinstance(v, list):
        return [x * 1000.0 if math.isfinite(x) else None for x in v]
    if key == "count":
        return v
    return v * 1000.0 if math.isfinite(v) else None


def summarize_server(
    samples: Sequence[ServerSample], start_s: float | None = None, end_s: float | None = None
) -> dict[str, Any]:
    """The summary dict of :mod:`servetune.metrics.server_summary` over [start_s, end_s]."""
    samples = sorted(samples, key=lambda s: s.t)
    if not samples:
        return {}
    start = samples[0].t if start_s is None else start_s
    end = samples[-1].t if end_s is None else end_s
    win = _in_window(samples, start, end)
    out: dict[str, Any] = {"window_s": [start, end], "samples": len(win)}

    kv = _gauge(win, ss.KV_CACHE_USAGE)
    if kv.size:
        out["kv_cache_usage_mean"] = float(kv.mean())
        out["kv_cache_usage_p95"] = float(np.percentile(kv, 95))
        out["kv_cache_usage_max"] = float(kv.max())
        out["kv_share_below_50"] = float((kv < 0.5).mean())
        out["kv_share_above_90"] = float((kv > 0.9).mean())

    for concept in (ss.RUNNING, ss.WAITING):
        v = _gauge(win, concept)
        if v.size:
            out[f"{concept}_mean"] = float(v.mean())
            out[f"{concept}_max"] = float(v.max())
    w_t = np.array([s.t for s in win if ss.WAITING in s.values], dtype=float)
    slope = _slope(w_t, _gauge(win, ss.WAITING))
    if slope is not None:
        out["waiting_slope_per_s"] = slope

    pre = _counter_between(samples, start, end, ss.PREEMPTIONS_TOTAL)
    if pre is not None:
        out["preemptions"] = pre[0]
        out["preemptions_per_s"] = pre[0] / pre[1]
    for concept, key in (
        (ss.PROMPT_TOKENS_TOTAL, "prompt_tokens_per_s"),
        (ss.GENERATION_TOKENS_TOTAL, "generation_tokens_per_s"),
        (ss.REQUESTS_FINISHED_TOTAL, "requests_finished_per_s"),
    ):
        inc = _counter_between(samples, start, end, concept)
        if inc is not None:
            out[key] = inc[0] / inc[1]
    aborted = _counter_between(samples, start, end, ss.REQUESTS_ABORTED_TOTAL)
    if aborted is not None:
        out["requests_aborted"] = aborted[0]

    hits = _counter_between(samples, start, end, ss.PREFIX_CACHE_HITS_TOTAL)
    queries = _counter_between(samples, start, end, ss.PREFIX_CACHE_QUERIES_TOTAL)
    if hits is not None and queries is not None and queries[0] > 0:
        out["prefix_cache_hit_rate"] = hits[0] / queries[0]
    else:
        rate = _gauge(win, ss.PREFIX_CACHE_HIT_RATE)
        if rate.size:
            out["prefix_cache_hit_rate"] = float(rate.mean())

    for concept, key, agg in GPU_GAUGES:
        v = _gauge(win, concept)
        if v.size:
            out[key] = float(v.mean() if agg == "mean" else v.max())

    for concept, key in HISTOGRAM_KEYS.items():
        br = _bracket(samples, start, end, concept, "histograms")
        if br is None:
            continue
        a, b = br
        h = hg.increase(
            [
                s.histograms[concept]
                for s in samples
                if a.t <= s.t <= b.t and concept in s.histograms
            ]
        )
        stats = hg.describe(h) if h is not None else {}
        if stats:
            out[key] = {k: _to_ms(k, v) for k, v in stats.items()}
    return out


def _label_number(labels: Mapping[str, str], key: str) -> float | None:
    """A numeric label; None when absent or not a finite number (vLLM writes ``"None"``)."""
    try:
        v = float(labels[key])
    except (KeyError, ValueError):
        return None
    return v if math.isfinite(v) else None


def cache_config(series: Sequence[Mapping[str, str]]) -> dict[str, Any]:
    """The summary keys of the engine's KV-cache configuration, from the label sets of
    ``vllm:cache_config_info`` (one per DP engine: their blocks add up). A label the page
    lacks, or says ``"None"`` for, gives no key."""
    if not series:
        return {}
    out: dict[str, Any] = {}
    blocks = [_label_number(labels, "num_gpu_blocks") for labels in series]
    size = _label_number(series[0], "block_size")
    if all(b is not None for b in blocks):
        out["kv_cache_blocks"] = int(sum(b for b in blocks if b is not None))
    if size is not None and size > 0:
        out["kv_block_size"] = int(size)
        if "kv_cache_blocks" in out:
            out["kv_cache_tokens"] = out["kv_cache_blocks"] * int(size)
    util = _label_number(series[0], "gpu_memory_utilization")
    if util is not None:
        out["gpu_memory_utilization"] = util
    dtype = series[0].get("cache_dtype")
    if dtype and dtype != "None":
        out["kv_cache_dtype"] = dtype
    return out
