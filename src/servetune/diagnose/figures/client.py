"""The figures the rules read, computed once per run (names and units:
:mod:`servetune.diagnose.figures.table`): client figures from ``run.json`` and
``requests.jsonl``, server figures from ``server_metrics.jsonl`` (reduced by
:func:`servetune.metrics.server_summary.summarize_server` over the client's measured window),
the engine knobs when known, and a few derived ones.

Every figure has a name, a label and a unit (``figure_table.FIGURES``). A figure that cannot be
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

import numpy as np

from servetune.diagnose.figures.config import derived_figures, knob_figures
from servetune.diagnose.figures.server import server_figures
from servetune.diagnose.figures.table import Figures
from servetune.diagnose.growth import growth_z, late_growth
from servetune.diagnose.knobs import KnownConfig
from servetune.metrics.prefix_check import check_prefix_cache
from servetune.metrics.timeline import (
    TAIL_RATIO,
    Stall,
    attribution_tolerance_s,
    in_flight,
    served_vs_sent,
    slope,
    stall_limit_ms,
    stream_stalls,
    tail_ratio,
)
from servetune.results.record import RequestRecord, classify_error
from servetune.results.schema import RunResult
from servetune.results.server_series import ServerSample

SERVER_GONE_CLASSES = ("connection_refused", "connection_reset")
"""Error classes of a server that stopped answering (a crash, an out-of-memory kill)."""
MIN_SENDING_S = 2.0
"""A sending period shorter than this shows no trend in the requests in flight."""


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
    fig.put("client_planned_rate", run.client_health.planned_rate)
    fig.put("client_achieved_rate", run.client_health.achieved_rate)
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


def _records(
    fig: Figures,
    run: RunResult,
    records: Sequence[RequestRecord],
    records_error: str | None = None,
) -> None:
    """Figures that need the per-request records: the sending period, requests in flight,
    stream stalls, the TTFT of short prompts."""
    no_records = (records_error or "requests.jsonl is missing") + (
        ": per-request figures cannot be computed"
    )
    if not records:
        for name in (
            "inflight_growth_per_s",
            "inflight_growth_late_share",
            "inflight_growth_z",
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
        gaps = [np.diff(np.asarray(r.chunk_ns, dtype=np.int64)) for r in ok if len(r.chunk_ns) > 1]
        if gaps:
            pooled = np.concatenate(gaps)
            fig.put("itl_zero_share", float(np.count_nonzero(pooled == 0)) / pooled.size)
        _stalls(fig, records)
    sends = np.sort(np.array([r.send_ns for r in records], dtype=float) / 1e9)
    ends = np.sort(np.array([r.end_ns for r in records], dtype=float) / 1e9)
    t0, t1 = float(sends[0]), float(sends[-1])
    fig.put("sending_s", t1 - t0)
    fig.texts["sending_window"] = f"{t0:.1f}–{t1:.1f} s"
    fig.sending = (t0, t1)
    if fig.get("burst") or fig.get("closed_loop"):
        why = "not a rate run (closed loop or all requests at once): no growth to measure"
        for name in (
            "inflight_growth_per_s",
            "inflight_growth_late_share",
            "inflight_growth_z",
            "served_sent_ratio",
        ):
            fig.miss(name, why)
        return
    if t1 - t0 < MIN_SENDING_S or len(records) < 20:
        why = (
            f"the sending period ({t1 - t0:.1f} s, {len(records)} requests) is too short "
            "to see a trend"
        )
        for name in (
            "inflight_growth_per_s",
            "inflight_growth_late_share",
            "inflight_growth_z",
            "served_sent_ratio",
        ):
            fig.miss(name, why)
        return
    ts = np.arange(t0, t1, min(0.5, (t1 - t0) / 20))
    inflight = in_flight(sends, ends, ts)
    fig.put("inflight_mean", float(inflight.mean()))
    growth = slope(ts, inflight)
    fig.put("inflight_growth_per_s", growth)
    offered = fig.get("offered_rate")
    # After the ramp-up (the first half), a server that keeps up holds a level; one past
    # capacity keeps piling up at (offered − served) per second (diagnose.growth).
    late = late_growth(ts, inflight, t0, t1)
    fig.put("inflight_growth_late_per_s", late)
    second = ts >= (t0 + t1) / 2
    finished = np.count_nonzero((ends >= (t0 + t1) / 2) & (ends <= t1))
    rise = slope(ts[second], inflight[second]) * (t1 - t0) / 2
    fig.put("inflight_growth_z", growth_z(rise, float(finished)))
    if offered:
        fig.put("inflight_growth_share", growth / offered)
        if late is not None:
            fig.put("inflight_growth_late_share", late / offered)
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


def compute_figures(
    run: RunResult,
    records: Sequence[RequestRecord],
    samples: Sequence[ServerSample],
    config: KnownConfig,
    series_error: str | None = None,
    records_error: str | None = None,
) -> Figures:
    """All figures of one run."""
    fig = Figures(config=config, label=run.label)
    _client(fig, run)
    knob_figures(fig, run)
    _records(fig, run, records, records_error)
    server_figures(fig, run, samples, series_error)
    derived_figures(fig, run)
    return fig
