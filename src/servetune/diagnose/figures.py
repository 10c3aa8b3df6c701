"""The figures the rules read, computed once per run: client figures from ``run.json`` and
``requests.jsonl``, server figures from ``server_metrics.jsonl`` (reduced by
:func:`servetune.metrics.server_summary.summarize_server` over the client's measured window),
the engine knobs when known, and a few derived ones.

Every figure has a name, a label and a unit (:data:`FIGURES`). A figure that cannot be
computed is *missing* with the reason in words ("KV usage not exposed by this server"), never
a guessed value. Durations are shares of the measured window: the server is scraped at a
fixed interval, so the share of samples is the share of time; the stretches where a gauge
stayed past a threshold are kept too (``windows``), in seconds on the run clock.

The statistics are defined in ``servetune.metrics`` (stretches, slopes, served/sent, stream
stalls and the prefills in them: :mod:`servetune.metrics.timeline`); the compute load uses the
simulated engine's FLOP model (:func:`servetune.sim.perf.model_flops`). Here they are only
named, put together for one run, and explained when missing. Engine knobs come from the
configuration known for the run (:mod:`servetune.diagnose.knobs`): a cap the server's
configuration does not give is unknown, never read off what a run happened to reach.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from servetune.diagnose.knobs import KnownConfig
from servetune.errors import ServetuneError
from servetune.metrics.prefix_check import check_prefix_cache
from servetune.metrics.server_summary import summarize_server
from servetune.metrics.timeline import (
    TAIL_RATIO,
    Stall,
    attribution_tolerance_s,
    in_flight,
    served_vs_sent,
    slope,
    stall_limit_ms,
    stream_stalls,
    stretches,
    tail_ratio,
)
from servetune.results import server_series as ss
from servetune.results.record import RequestRecord, classify_error
from servetune.results.schema import RunResult
from servetune.results.server_series import ServerSample

SERVER_GONE_CLASSES = ("connection_refused", "connection_reset")
"""Error classes of a server that stopped answering (a crash, an out-of-memory kill)."""
MIN_SAMPLES = 6
"""Fewer server samples than this in the window: no durations are judged."""
MIN_SENDING_S = 2.0
"""A sending period shorter than this shows no trend in the requests in flight."""

GPU_UTIL_MISSING = "GPU utilisation not measured (pass --dcgm-url or run on the GPU host)"
MODEL_GPU_MISSING = (
    "the GPU and the model are unknown, so the compute load cannot be estimated "
    '(pass --gpu and --model, or --server-cmd "vllm serve MODEL …" --gpu GPU)'
)


@dataclass(frozen=True)
class FigureDef:
    label: str
    unit: str
    """pct (0–1 shown as %), ms, s, req/s, tok/s, count, ratio (×), tokens, flag, per_s, GiB."""


FIGURES: dict[str, FigureDef] = {
    # client
    "completed": FigureDef("requests completed", "count"),
    "failed_share": FigureDef("failed requests", "pct"),
    "duration_s": FigureDef("measured window", "s"),
    "offered_rate": FigureDef("offered request rate", "req/s"),
    "burst": FigureDef("all requests sent at once (rate inf)", "flag"),
    "closed_loop": FigureDef("closed loop (fixed concurrency)", "flag"),
    "max_concurrency": FigureDef("client concurrency cap", "count"),
    "request_throughput": FigureDef("request throughput", "req/s"),
    "output_throughput": FigureDef("output throughput", "tok/s"),
    "total_token_throughput": FigureDef("total token throughput", "tok/s"),
    "ttft_p50_ms": FigureDef("P50 TTFT", "ms"),
    "ttft_p99_ms": FigureDef("P99 TTFT", "ms"),
    "ttft_max_ms": FigureDef("max TTFT", "ms"),
    "ttft_short_p99_ms": FigureDef("P99 TTFT of the shorter half of the prompts", "ms"),
    "ttft_short_spike_ratio": FigureDef(
        "P99 TTFT of the shorter half of the prompts / P50 TTFT", "ratio"
    ),
    "tpot_p50_ms": FigureDef("P50 TPOT", "ms"),
    "tpot_p99_ms": FigureDef("P99 TPOT", "ms"),
    "itl_p50_ms": FigureDef("P50 ITL", "ms"),
    "itl_p99_ms": FigureDef("P99 ITL", "ms"),
    "itl_max_ms": FigureDef("longest gap between two tokens of a stream", "ms"),
    "e2e_p99_ms": FigureDef("P99 E2E latency", "ms"),
    "ttft_spike_ratio": FigureDef("P99/P50 TTFT", "ratio"),
    "itl_stall_ratio": FigureDef("longest token gap / P50 ITL", "ratio"),
    "stalls": FigureDef(
        "engine stalls seen by the streams (token gaps ≥ 10× P50 ITL and ≥ 250 ms)", "count"
    ),
    "stall_limit_ms": FigureDef("shortest token gap counted as a stall", "ms"),
    "stall_longest_ms": FigureDef("longest stall", "ms"),
    "stalled_streams": FigureDef("requests whose stream stalled", "count"),
    "stalls_at_prefill": FigureDef("stalls in which another request was prefilled", "count"),
    "stalls_at_prefill_share": FigureDef(
        "share of the stalls in which another request was prefilled", "pct"
    ),
    "stall_prompt_max": FigureDef("longest prompt prefilled during a stall", "tokens"),
    "tpot_tail_ratio": FigureDef("P99 TPOT / P50 TPOT", "ratio"),
    "itl_tail_ratio": FigureDef("P99 ITL / P50 ITL", "ratio"),
    "slow_gaps": FigureDef("token gaps ≥ 5× the P50 ITL (merged over streams)", "count"),
    "slow_gaps_at_prefill_share": FigureDef(
        "share of the slow token gaps in which another request was prefilled", "pct"
    ),
    "input_len_p50": FigureDef("median prompt length", "tokens"),
    "input_len_max": FigureDef("longest prompt", "tokens"),
    "input_spread": FigureDef("longest / median prompt", "ratio"),
    "output_len_mean": FigureDef("mean output length", "tokens"),
    "tokens_per_request": FigureDef("mean prompt + output tokens per request", "tokens"),
    "max_request_tokens": FigureDef("longest prompt + output", "tokens"),
    "client_behind": FigureDef("client fell behind its schedule", "flag"),
    "prefix_cache_hit_rate": FigureDef("prefix-cache hit rate (server)", "pct"),
    "prefix_hit_rate_implied": FigureDef("prompt share the workload's own prompts repeat", "pct"),
    "prefix_hit_rate_ceiling": FigureDef("highest hit rate the workload allows", "pct"),
    "prefix_cache_excess": FigureDef("hit rate above what the workload allows", "pct"),
    "send_lag_p99_ms": FigureDef("P99 client send lag", "ms"),
    "sending_s": FigureDef("sending period", "s"),
    "inflight_mean": FigureDef("mean requests in flight while sending", "count"),
    "inflight_growth_per_s": FigureDef("growth of requests in flight while sending", "per_s"),
    "served_sent_ratio": FigureDef(
        "requests finished / requests sent over the second half of the sending period", "ratio"
    ),
    "inflight_growth_share": FigureDef(
        "growth of requests in flight as a share of the offered rate", "pct"
    ),
    "inflight_growth_late_per_s": FigureDef(
        "growth of requests in flight over the second half of the sending period", "per_s"
    ),
    "inflight_growth_late_share": FigureDef(
        "growth of requests in flight over the second half, as a share of the offered rate",
        "pct",
    ),
    "served_deficit_z": FigureDef(
        "shortfall of finished vs sent requests over the second half, in standard deviations",
        "num",
    ),
    "served_rate": FigureDef("rate the server kept up with while sending", "req/s"),
    "server_errors_oom": FigureDef("requests failed with an out-of-memory error", "count"),
    "server_gone": FigureDef("requests failed because the server stopped answering", "count"),
    # server
    "server_samples": FigureDef("server samples in the window", "count"),
    "kv_mean": FigureDef("mean KV-cache use", "pct"),
    "kv_p95": FigureDef("P95 KV-cache use", "pct"),
    "kv_max": FigureDef("max KV-cache use", "pct"),
    "kv_share_below_50": FigureDef("share of the window with KV-cache use < 50%", "pct"),
    "kv_share_above_90": FigureDef("share of the window with KV-cache use > 90%", "pct"),
    "running_mean": FigureDef("mean running requests", "count"),
    "running_max": FigureDef("max running requests", "count"),
    "running_at_cap_share": FigureDef("share of the window with running at its cap", "pct"),
    "waiting_mean": FigureDef("mean waiting requests", "count"),
    "waiting_max": FigureDef("max waiting requests", "count"),
    "waiting_share": FigureDef("share of the window with requests waiting", "pct"),
    "waiting_slope_sending": FigureDef("trend of waiting requests while sending", "per_s"),
    "preemptions": FigureDef("preemptions in the window", "count"),
    "preemptions_per_s": FigureDef("preemptions per second", "per_s"),
    "preemptions_per_request": FigureDef("preemptions per completed request", "ratio"),
    "gpu_utilization_mean": FigureDef("mean GPU utilisation", "pct"),
    "queue_p99_ms": FigureDef("P99 time in the engine's queue (server histogram)", "ms"),
    # knobs and derived
    "max_num_seqs": FigureDef("--max-num-seqs", "count"),
    "max_num_batched_tokens": FigureDef("--max-num-batched-tokens", "tokens"),
    "max_model_len": FigureDef("--max-model-len", "tokens"),
    "gpu_memory_utilization": FigureDef("--gpu-memory-utilization", "num"),
    "enable_chunked_prefill": FigureDef("chunked prefill on", "flag"),
    "quantized": FigureDef("weights quantized", "flag"),
    "kv_fp8": FigureDef("KV cache in fp8", "flag"),
    "tensor_parallel_size": FigureDef("--tensor-parallel-size", "count"),
    "long_prefill_token_threshold": FigureDef("--long-prefill-token-threshold", "tokens"),
    "kv_pool_tokens": FigureDef("KV pool size", "tokens"),
    "pool_requests": FigureDef("requests of the mean size the KV pool holds", "count"),
    "batch_fill": FigureDef("mean running / --max-num-seqs", "pct"),
    "running_cap": FigureDef("the running cap", "count"),
    "compute_use_est": FigureDef(
        "estimated compute load (model FLOPs per token × tokens/s ÷ the GPU's peak)", "pct"
    ),
    "compute_ceiling": FigureDef(
        "share of the peak the engine reaches at best (the step model's calibrated MFU)", "pct"
    ),
    "compute_of_ceiling": FigureDef("estimated compute load / what the engine reaches", "pct"),
    "server_prompt_tokens_per_s": FigureDef("prompt tokens per second (server)", "tok/s"),
    "server_generation_tokens_per_s": FigureDef("generated tokens per second (server)", "tok/s"),
    # the config doctor
    "workload_input_len": FigureDef("workload prompt length (mean)", "tokens"),
    "workload_output_len": FigureDef("workload output length (mean)", "tokens"),
    "workload_input_max": FigureDef("workload's longest prompt", "tokens"),
    "workload_request_max": FigureDef("workload's longest prompt + output", "tokens"),
    "pool_per_seq": FigureDef("average requests the pool holds per --max-num-seqs", "ratio"),
    "kv_use_at_cap": FigureDef("KV use with --max-num-seqs average requests", "pct"),
    "mml_over_workload": FigureDef("--max-model-len / longest request", "ratio"),
    "mml_pool_gain": FigureDef("KV pool gained by lowering --max-model-len", "pct"),
    "mml_pool_share": FigureDef("share of the pool one max-model-len request can hold", "pct"),
    "prefill_stall_ms": FigureDef("one step running the longest prompt whole", "ms"),
    "mnbt_over_prompt": FigureDef("--max-num-batched-tokens / longest prompt", "ratio"),
    "max_concurrency_at_mml": FigureDef("vLLM's maximum concurrency at max-model-len", "ratio"),
}


@dataclass
class Figures:
    """Named values of one run, the reasons for the missing ones, and time windows."""

    values: dict[str, float] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    windows: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    """Stretches (start, end) in run seconds where a gauge was past a threshold."""
    texts: dict[str, str] = field(default_factory=dict)
    """Words that go with some figures (e.g. where the running cap came from)."""
    config: KnownConfig = field(default_factory=KnownConfig)
    label: str | None = None
    sending: tuple[float, float] | None = None
    """First and last send, run seconds."""

    def get(self, name: str) -> float | None:
        return self.values.get(name)

    def has(self, name: str) -> bool:
        return name in self.values

    def put(self, name: str, value: float | int | bool | None, why_missing: str = "") -> None:
        if value is None or (isinstance(value, float) and not math.isfinite(value)):
            if why_missing and name not in self.values:
                self.missing.setdefault(name, why_missing)
            return
        self.values[name] = float(value)
        self.missing.pop(name, None)

    def miss(self, name: str, why: str) -> None:
        if name not in self.values:
            self.missing.setdefault(name, why)


# --- helpers ------------------------------------------------------------------------------


def _gauge(samples: Sequence[ServerSample], concept: str) -> tuple[np.ndarray, np.ndarray]:
    having = [s for s in samples if concept in s.values]
    return (
        np.array([s.t for s in having], dtype=float),
        np.array([s.values[concept] for s in having], dtype=float),
    )


def read_series_tolerant(run_dir: Path) -> tuple[list[ServerSample], str | None]:
    """The server series, or ([], why) when it cannot be read (diagnose never fails on it)."""
    from pydantic import ValidationError

    from servetune.results.io import SERVER_METRICS_FILE, read_server_series

    if not (run_dir / SERVER_METRICS_FILE).exists():
        return [], None
    try:
        return read_server_series(run_dir), None
    except (ServetuneError, ValidationError, ValueError) as exc:
        first = str(exc).splitlines()[0]
        return [], f"{SERVER_METRICS_FILE} could not be read ({first})"


# --- client -------------------------------------------------------------------------------


def _client(fig: Figures, run: RunResult) -> None:
    s = run.summary
    cfg = run.config
    total = s.completed + s.failed
    fig.put("completed", s.completed)
    fig.put("failed_share", s.failed / total if total else None)
    fig.put("duration_s", s.duration_s)
    no_req = "no request completed in the measured window"
    closed = math.isinf(cfg.request_rate) and cfg.max_concurrency is not None
    fig.put("closed_loop", closed)
    fig.put("burst", math.isinf(cfg.request_rate) and cfg.max_concurrency is None)
    if cfg.max_concurrency is not None:
        fig.put("max_concurrency", cfg.max_concurrency)
    if math.isinf(cfg.request_rate):
        fig.miss(
            "offered_rate",
            "the run has no offered rate (closed loop or all requests at once)",
        )
    else:
        fig.put("offered_rate", cfg.request_rate)
    fig.put("client_behind", run.client_health.behind)
    cache = check_prefix_cache(run)
    if cache is not None:
        fig.put("prefix_cache_hit_rate", cache.measured)
        fig.put("prefix_hit_rate_implied", cache.implied)
        fig.put("prefix_hit_rate_ceiling", cache.ceiling)
        fig.put("prefix_cache_excess", cache.measured - cache.ceiling)
    fig.put("send_lag_p99_ms", run.client_health.send_lag.p99)
    if s.completed == 0:
        for name in ("request_throughput", "ttft_p50_ms", "ttft_p99_ms", "tpot_p99_ms"):
            fig.miss(name, no_req)
        return
    fig.put("request_throughput", s.request_throughput)
    fig.put("output_throughput", s.output_throughput)
    fig.put("total_token_throughput", s.total_token_throughput)
    for name, st in (("ttft", s.ttft), ("tpot", s.tpot), ("itl", s.itl), ("e2e", s.e2el)):
        fig.put(f"{name}_p50_ms", st.p50, no_req)
        fig.put(f"{name}_p99_ms", st.p99, no_req)
    fig.put("ttft_max_ms", s.ttft.max)
    fig.put("itl_max_ms", s.itl.max, "no stream had two tokens")
    fig.put("tpot_tail_ratio", tail_ratio(s.tpot.p99, s.tpot.p50))
    fig.put("itl_tail_ratio", tail_ratio(s.itl.p99, s.itl.p50))
    p50, p99 = s.ttft.p50, s.ttft.p99
    if p50 and p99 is not None and p50 > 0:
        fig.put("ttft_spike_ratio", p99 / p50)
    if s.itl.p50 and s.itl.max is not None and s.itl.p50 > 0:
        fig.put("itl_stall_ratio", s.itl.max / s.itl.p50)
    inp = s.input_tokens_per_request
    fig.put("input_len_p50", inp.p50)
    fig.put("input_len_max", inp.max)
    if inp.p50 and inp.max is not None and inp.p50 > 0:
        fig.put("input_spread", inp.max / inp.p50)
    out = s.output_tokens_per_request
    fig.put("output_len_mean", out.mean)
    if inp.mean is not None and out.mean is not None:
        fig.put("tokens_per_request", inp.mean + out.mean)
    errors = s.errors or {}
    oom = sum(
        n
        for reason, n in errors.items()
        if any(k in reason.lower() for k in ("out of memory", "outofmemory", " oom", "cuda error"))
    )
    # The client's error classes (results.record.classify_error), not the messages' words;
    # an out-of-memory error is only told by the server's own message text.
    classes: dict[str, int] = dict(s.error_classes)
    if not classes:  # a run.json written before the classes were recorded
        for reason, n in errors.items():
            cls = classify_error(reason)
            classes[cls] = classes.get(cls, 0) + n
    gone = sum(n for cls, n in classes.items() if cls in SERVER_GONE_CLASSES)
    fig.put("server_errors_oom", oom)
    fig.put("server_gone", gone)


def _records(fig: Figures, run: RunResult, records: Sequence[RequestRecord]) -> None:
    """Figures that need the per-request records: the sending period, requests in flight,
    stream stalls, the TTFT of short prompts."""
    no_records = "requests.jsonl is missing: per-request figures cannot be computed"
    if not records:
        for name in (
            "inflight_growth_per_s",
            "inflight_growth_late_share",
            "served_sent_ratio",
            "stalls",
            "sending_s",
        ):
            fig.miss(name, no_records)
        return
    ok = [r for r in records if r.ok]
    if ok:
        fig.put(
            "max_request_tokens",
            max(r.planned_input_len + (r.output_tokens or r.planned_output_len or 0) for r in ok),
        )
        lens = np.array([r.planned_input_len for r in ok], dtype=float)
        med = float(np.median(lens))
        short = [r.ttft_ms for r in ok if r.planned_input_len <= med and r.ttft_ms is not None]
        if short:
            short_p99 = float(np.percentile(np.array(short), 99))
            fig.put("ttft_short_p99_ms", short_p99)
            p50 = fig.get("ttft_p50_ms")
            if p50:
                fig.put("ttft_short_spike_ratio", short_p99 / p50)
        _stalls(fig, records)
    sends = np.sort(np.array([r.send_ns for r in records], dtype=float) / 1e9)
    ends = np.sort(np.array([r.end_ns for r in records], dtype=float) / 1e9)
    t0, t1 = float(sends[0]), float(sends[-1])
    fig.put("sending_s", t1 - t0)
    fig.texts["sending_window"] = f"{t0:.1f}–{t1:.1f} s"
    fig.sending = (t0, t1)
    if fig.get("burst") or fig.get("closed_loop"):
        why = "not a rate run (closed loop or all requests at once): no growth to measure"
        for name in ("inflight_growth_per_s", "inflight_growth_late_share", "served_sent_ratio"):
            fig.miss(name, why)
        return
    if t1 - t0 < MIN_SENDING_S or len(records) < 20:
        why = (
            f"the sending period ({t1 - t0:.1f} s, {len(records)} requests) is too short "
            "to see a trend"
        )
        for name in ("inflight_growth_per_s", "inflight_growth_late_share", "served_sent_ratio"):
            fig.miss(name, why)
        return
    ts = np.arange(t0, t1, min(0.5, (t1 - t0) / 20))
    inflight = in_flight(sends, ends, ts)
    fig.put("inflight_mean", float(inflight.mean()))
    growth = slope(ts, inflight)
    fig.put("inflight_growth_per_s", growth)
    offered = fig.get("offered_rate")
    late = ts >= (t0 + t1) / 2
    late_growth = slope(ts[late], inflight[late])
    fig.put("inflight_growth_late_per_s", late_growth)
    if offered:
        fig.put("inflight_growth_share", growth / offered)
        # After the ramp-up (the first half), a server that keeps up holds a level; one past
        # capacity keeps piling up at (offered − served) per second.
        fig.put("inflight_growth_late_share", late_growth / offered)
    # Finished / sent over the second half of the sending period: ≈ 1 for a server that keeps
    # up, once the requests sent first have had time to finish — so only when they are
    # quicker than half the period.
    early = [
        r.e2e_ms / 1e3
        for r in records
        if r.ok and r.e2e_ms is not None and r.send_ns / 1e9 <= t0 + (t1 - t0) / 4
    ]
    early_e2e = float(np.median(early)) if early else None
    if early_e2e is not None and early_e2e > (t1 - t0) / 2:
        fig.miss(
            "served_sent_ratio",
            f"the sending period ({t1 - t0:.1f} s) is short next to the requests' own latency "
            f"(median {early_e2e:.1f} s)",
        )
        return
    half = served_vs_sent(sends, ends, (t0 + t1) / 2, t1)
    if half.sent >= 5:
        fig.put("served_sent_ratio", half.ratio)
        fig.put("served_deficit_z", half.deficit_z)
        if offered is not None:
            fig.put("served_rate", offered * half.ratio)


def _stalls(fig: Figures, records: Sequence[RequestRecord]) -> None:
    """Stalls of the streams and the prefills that ran in them; the slow gaps (≥ 5× the P50
    ITL) likewise, for a tail that is not yet a stall."""
    itl_p50 = fig.get("itl_p50_ms")
    if itl_p50 is None:
        return
    limit = stall_limit_ms(itl_p50)
    tol = attribution_tolerance_s(itl_p50)
    events = stream_stalls(records, limit, tol)
    fig.put("stall_limit_ms", limit)
    fig.put("stalls", len(events))
    fig.windows["stall_windows"] = sorted(
        ((e.start_s, e.end_s) for e in events), key=lambda w: w[0] - w[1]
    )
    if not events:
        fig.put("stalls_at_prefill", 0)
        fig.put("stalled_streams", 0)
    else:
        at_prefill = [e for e in events if e.prefills]
        fig.put("stall_longest_ms", max(e.longest_gap_ms for e in events))
        fig.put("stalled_streams", len({r for e in events for r in e.streams}))
        fig.put("stalls_at_prefill", len(at_prefill))
        fig.put("stalls_at_prefill_share", len(at_prefill) / len(events))
        culprits = [c for c in (e.culprit for e in at_prefill) if c is not None]
        if culprits:
            fig.put("stall_prompt_max", max(c.prompt_tokens for c in culprits))
        examples = sorted(events, key=lambda e: -e.duration_ms)[:3]
        fig.texts["stall_examples"] = "; ".join(_stall_text(e) for e in examples)
    if itl_p50 > 0:
        slow = stream_stalls(records, TAIL_RATIO * itl_p50, tol)
        fig.put("slow_gaps", len(slow))
        if slow:
            fig.put("slow_gaps_at_prefill_share", sum(1 for e in slow if e.prefills) / len(slow))


def _stall_text(e: Stall) -> str:
    n = len(e.streams)
    text = (
        f"{e.start_s:.1f}–{e.end_s:.1f} s: {n} stream{'s' * (n != 1)} waited up to "
        f"{e.longest_gap_ms / 1e3:.2f} s"
    )
    c = e.culprit
    if c is not None:
        others = len(e.prefills) - 1
        text += (
            f" while the engine prefilled request {c.request} ({c.prompt_tokens:,} prompt "
            f"tokens" + (f", and {others} more" if others > 0 else "") + ")"
        )
    else:
        text += " with no prefill finishing then (not a prefill stall)"
    return text


# --- server -------------------------------------------------------------------------------


def _server_missing_reason(run: RunResult, samples: Sequence[ServerSample], concept: str) -> str:
    if not samples:
        err = run.server.error if run.server is not None and run.server.error else None
        base = "server metrics were not scraped (no server_metrics.jsonl)"
        return f"{base}: {err}" if err else base
    return {
        ss.KV_CACHE_USAGE: "KV usage not exposed by this server",
        ss.RUNNING: "running requests not exposed by this server",
        ss.WAITING: "waiting requests not exposed by this server",
        ss.PREEMPTIONS_TOTAL: "preemptions not exposed by this server "
        "(vLLM counts them; SGLang, TGI and llama.cpp do not)",
        ss.GPU_UTILIZATION: GPU_UTIL_MISSING,
    }.get(concept, f"{concept} not exposed by this server")


def _server(
    fig: Figures, run: RunResult, samples: Sequence[ServerSample], unreadable: str | None
) -> None:
    s = run.summary
    start, end = s.window_start_s, s.window_end_s
    if unreadable:
        samples = []
    win = [x for x in samples if start <= x.t <= end] if samples else []

    def reason(concept: str) -> str:
        if unreadable:
            return unreadable
        return _server_missing_reason(run, samples, concept)

    fig.put("server_samples", len(win))
    server_names = [
        ("kv", ss.KV_CACHE_USAGE),
        ("running", ss.RUNNING),
        ("waiting", ss.WAITING),
        ("preemptions", ss.PREEMPTIONS_TOTAL),
    ]
    if not win:
        for prefix, concept in server_names:
            for name in FIGURES:
                if name.startswith(prefix):
                    fig.miss(name, reason(concept))
        fig.miss("gpu_utilization_mean", GPU_UTIL_MISSING)
        fig.miss("queue_p99_ms", reason("queue"))
        return
    summ = summarize_server(samples, start, end)
    few = len(win) < MIN_SAMPLES
    few_why = (
        f"only {len(win)} server samples in the measured window: too few to judge how long "
        "a condition lasted"
    )

    # KV cache
    if "kv_cache_usage_mean" in summ:
        fig.put("kv_mean", summ["kv_cache_usage_mean"])
        fig.put("kv_p95", summ["kv_cache_usage_p95"])
        fig.put("kv_max", summ["kv_cache_usage_max"])
        if few:
            fig.miss("kv_share_below_50", few_why)
            fig.miss("kv_share_above_90", few_why)
        else:
            fig.put("kv_share_below_50", summ["kv_share_below_50"])
            fig.put("kv_share_above_90", summ["kv_share_above_90"])
            ts, kv = _gauge(win, ss.KV_CACHE_USAGE)
            fig.windows["kv_above_90"] = stretches(ts, kv > 0.9)
            fig.windows["kv_below_50"] = stretches(ts, kv < 0.5)
    else:
        for name in ("kv_mean", "kv_p95", "kv_max", "kv_share_below_50", "kv_share_above_90"):
            fig.miss(name, reason(ss.KV_CACHE_USAGE))

    # running / waiting
    cap_knob = fig.config.number("max_num_seqs")
    if "running_mean" in summ:
        fig.put("running_mean", summ["running_mean"])
        fig.put("running_max", summ["running_max"])
        ts, run_v = _gauge(win, ss.RUNNING)
        cap = cap_knob or None
        if cap is not None:
            fig.texts["running_cap_source"] = f"--max-num-seqs {int(cap)}"
        else:
            cap, source = _default_cap(fig)
            fig.texts["running_cap_source"] = source
        fig.put(
            "running_cap",
            cap,
            f"the server's --max-num-seqs is unknown (the highest running count seen, "
            f"{int(summ['running_max'])}, is what this run reached, not the cap): pass "
            '--server-cmd "vllm serve MODEL …" with the command the server was started with',
        )
        if few:
            fig.miss("running_at_cap_share", few_why)
        elif cap is None:
            fig.miss("running_at_cap_share", fig.missing.get("running_cap", "cap unknown"))
        elif cap > 0:
            at_cap = run_v >= max(cap - 0.5, 0.95 * cap)
            fig.put("running_at_cap_share", float(at_cap.mean()))
            fig.windows["running_at_cap"] = stretches(ts, at_cap)
    else:
        for name in ("running_mean", "running_max", "running_at_cap_share", "running_cap"):
            fig.miss(name, reason(ss.RUNNING))
    if "waiting_mean" in summ:
        fig.put("waiting_mean", summ["waiting_mean"])
        fig.put("waiting_max", summ["waiting_max"])
        ts, wait = _gauge(win, ss.WAITING)
        if few:
            fig.miss("waiting_share", few_why)
        else:
            fig.put("waiting_share", float((wait > 0).mean()))
            fig.windows["waiting"] = stretches(ts, wait > 0)
        if fig.sending is not None:
            trend = summarize_server(samples, *fig.sending).get("waiting_slope_per_s")
            fig.put("waiting_slope_sending", trend)
    else:
        for name in ("waiting_mean", "waiting_max", "waiting_share", "waiting_slope_sending"):
            fig.miss(name, reason(ss.WAITING))

    # preemptions
    if "preemptions" in summ:
        fig.put("preemptions", summ["preemptions"])
        fig.put("preemptions_per_s", summ["preemptions_per_s"])
        if s.completed:
            fig.put("preemptions_per_request", summ["preemptions"] / s.completed)
    else:
        for name in ("preemptions", "preemptions_per_s", "preemptions_per_request"):
            fig.miss(name, reason(ss.PREEMPTIONS_TOTAL))

    if "gpu_utilization_mean" in summ:
        fig.put("gpu_utilization_mean", summ["gpu_utilization_mean"])
    else:
        fig.miss("gpu_utilization_mean", GPU_UTIL_MISSING)
    queue = summ.get("queue_ms")
    if isinstance(queue, dict) and "p99" in queue:
        fig.put("queue_p99_ms", queue["p99"])
    else:
        fig.miss("queue_p99_ms", "the engine's queue-time histogram is not exposed")
    for key in ("prompt_tokens_per_s", "generation_tokens_per_s"):
        if key in summ:
            fig.put(f"server_{key}", float(summ[key]))


def _default_cap(fig: Figures) -> tuple[float | None, str]:
    """The running cap from the knob registry's default, when the engine and the GPU are
    known (``--max-num-seqs`` left at vLLM's default); else unknown."""
    cfg = fig.config
    if cfg.engine not in ("vllm", "sim", "vllm-cpu") or not cfg.gpu or cfg.source == "unknown":
        return None, "--max-num-seqs unknown"
    from servetune.knobs import DefaultContext, default
    from servetune.sim.catalog import find_gpu

    try:
        gpu = find_gpu(cfg.gpu)
    except ServetuneError:
        return None, "--max-num-seqs unknown"
    value = default(
        cfg.engine, "max_num_seqs", DefaultContext(device_name=gpu.name, device_gib=gpu.usable_gib)
    )
    if not isinstance(value, int | float):
        return None, "--max-num-seqs unknown"
    return float(value), f"vLLM's default --max-num-seqs {int(value)} on {gpu.name}"


# --- knobs and derived ----------------------------------------------------------------------


NUMERIC_KNOB_FIGURES = (
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_model_len",
    "gpu_memory_utilization",
    "tensor_parallel_size",
    "long_prefill_token_threshold",
)
KNOB_FIGURES = (*NUMERIC_KNOB_FIGURES, "enable_chunked_prefill", "quantized", "kv_fp8")
"""The figures that come from the engine's configuration, not from what it measured."""


def _knobs(fig: Figures, run: RunResult) -> None:
    cfg = fig.config
    why = (
        'the engine configuration is unknown (pass --server-cmd "vllm serve MODEL …" with the '
        "flags the server was started with)"
    )
    for knob in NUMERIC_KNOB_FIGURES:
        fig.put(knob, cfg.number(knob), why)
    chunked = cfg.get("enable_chunked_prefill")
    fig.put("enable_chunked_prefill", chunked if isinstance(chunked, bool) else None, why)
    if "quantization" in cfg.values:
        fig.put("quantized", cfg.get("quantization") is not None)
    else:
        fig.miss("quantized", why)
    if "kv_cache_dtype" in cfg.values:
        dtype = cfg.get("kv_cache_dtype")
        fig.put("kv_fp8", isinstance(dtype, str) and dtype.startswith("fp8"))
    else:
        fig.miss("kv_fp8", why)
    pool = cfg.kv_pool_tokens
    if pool is None and run.server is not None:
        # what the server itself says (vLLM's cache_config_info, read by the scraper): no
        # --server-cmd or GPU needed for a real server's pool
        tokens = run.server.summary.get("kv_cache_tokens")
        if isinstance(tokens, int | float) and not isinstance(tokens, bool) and tokens > 0:
            pool = int(tokens)
    fig.put("kv_pool_tokens", pool, "the KV pool size is unknown (the server does not say)")


def _derived(fig: Figures, run: RunResult) -> None:
    seqs = fig.get("max_num_seqs")
    running = fig.get("running_mean")
    if seqs and running is not None:
        fig.put("batch_fill", running / seqs)
    per_req = fig.get("tokens_per_request")
    pool = fig.get("kv_pool_tokens")
    if pool and per_req:
        fig.put("pool_requests", pool / per_req)
        fig.texts["pool_requests_how"] = "KV pool ÷ mean request size"
    elif running and fig.get("kv_mean"):
        kv = fig.get("kv_mean") or 0.0
        if kv > 0.01:
            fig.put("pool_requests", running / kv)
            fig.texts["pool_requests_how"] = "≈ mean running ÷ mean KV use"
    # compute load estimate
    cfg = fig.config
    if not (cfg.gpu and cfg.model):
        fig.miss("compute_use_est", MODEL_GPU_MISSING)
        return
    from servetune.sim.catalog import find_gpu, find_model

    try:
        gpu = find_gpu(cfg.gpu)
        model = find_model(cfg.model)
    except ServetuneError as exc:
        fig.miss("compute_use_est", f"cannot estimate the compute load: {exc.message}")
        return
    s = run.summary
    if s.duration_s <= 0 or s.completed == 0:
        fig.miss("compute_use_est", "no completed request to count tokens from")
        return
    from servetune.sim.catalog import efficiency
    from servetune.sim.perf import model_flops, peak_flops

    in_len = fig.get("input_len_p50") or 0.0
    out_len = fig.get("output_len_mean") or 0.0
    p_rate = fig.get("server_prompt_tokens_per_s")
    g_rate = fig.get("server_generation_tokens_per_s")
    if p_rate is None:
        p_rate = s.total_input_tokens / s.duration_s
    if g_rate is None:
        g_rate = s.output_throughput
    fp, fg = model_flops(model).per_token(in_len, out_len)
    tp = int(cfg.number("tensor_parallel_size") or 1)
    quant = cfg.get("quantization")
    peak = peak_flops(gpu, quant if isinstance(quant, str) else None, tp)
    fp8 = quant == "fp8" and gpu.fp8_tflops is not None
    est = (p_rate * fp + g_rate * fg) / peak
    fig.put("compute_use_est", est)
    ceiling = efficiency(gpu).mfu
    fig.put("compute_ceiling", ceiling)
    if ceiling > 0:
        fig.put("compute_of_ceiling", est / ceiling)
    fig.texts["compute_peak"] = (
        f"{peak / 1e12:.0f} TFLOP/s ({'fp8' if fp8 else 'bf16'} peak of {tp}× {gpu.name})"
    )


def compute_figures(
    run: RunResult,
    records: Sequence[RequestRecord],
    samples: Sequence[ServerSample],
    config: KnownConfig,
    series_error: str | None = None,
) -> Figures:
    """All figures of one run."""
    fig = Figures(config=config, label=run.label)
    _client(fig, run)
    _knobs(fig, run)
    _records(fig, run, records)
    _server(fig, run, samples, series_error)
    _derived(fig, run)
    return fig
