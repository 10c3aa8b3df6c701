"""From RequestRecords to the Summary of a run (the metric contract of docs/metrics.md).

The measured window starts ``warmup_s`` after the run's start and ends ``cooldown_s`` before
the last response ended. A request counts when it was scheduled inside the window and, if it
succeeded, ended inside it; the others are "excluded" (kept on disk, left out of figures).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from itertools import chain

import numpy as np

from servetune.metrics.session_summary import cache_figures, session_figures
from servetune.metrics.stats import describe
from servetune.results.record import NS_PER_MS, RequestRecord
from servetune.results.schema import (
    DEFAULT_MAX_FAILURE_RATE,
    DEFAULT_METRIC_PERCENTILES,
    DEFAULT_PERCENTILE_METRICS,
    BenchConfig,
    Failures,
    RunStatus,
    Slo,
    Stats,
    Summary,
    percentile_word,
)

NS = 1_000_000_000


def _concurrency(records: Sequence[RequestRecord], start: int, end: int) -> tuple[int, float]:
    """Peak and time-averaged number of requests in flight within [start, end]."""
    if not records or end <= start:
        return 0, 0.0
    n = len(records)
    events = np.empty((2 * n, 2), dtype=np.int64)
    events[:n, 0] = np.fromiter((r.send_ns for r in records), dtype=np.int64, count=n)
    events[n:, 0] = np.fromiter((r.end_ns for r in records), dtype=np.int64, count=n)
    events[:n, 1] = 1
    events[n:, 1] = -1
    order = np.lexsort((events[:, 1], events[:, 0]))  # ends before sends at equal times
    times, deltas = events[order, 0], events[order, 1]
    level = np.cumsum(deltas)
    peak = int(level.max()) if len(level) else 0
    t = np.clip(times, start, end)
    area = float(np.sum(level[:-1] * np.diff(t)))
    return peak, area / (end - start)


ItlSource = Callable[[Sequence[RequestRecord]], "np.ndarray | None"]
"""A caller's faster way to the pooled ITL of the records it made (``summarize``'s
``itl_ms``): the same array :func:`_itl_ms` would compute, or ``None`` to let it."""


def pooled_itl_ms(flat: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """The gaps (ms) within each record's chunk times, pooled: ``flat`` holds the records'
    chunk times (ns) one record after another, ``lens`` how many each has (every one > 1)."""
    gaps = np.diff(flat)
    keep = np.ones(len(gaps), dtype=bool)
    keep[np.cumsum(lens[:-1]) - 1] = False  # a record's first chunk: no gap
    out: np.ndarray = gaps[keep] / NS_PER_MS
    return out


def _itl_ms(ok: Sequence[RequestRecord]) -> np.ndarray:
    """Every record's ``itl_ms()`` pooled, computed on one array (the simulator's records
    carry one chunk per token: 100k+ gaps a run)."""
    chunks = [c for r in ok if len(c := r.chunk_ns) > 1]
    if not chunks:
        return np.zeros(0)
    lens = np.fromiter(map(len, chunks), dtype=np.int64, count=len(chunks))
    flat = np.fromiter(chain.from_iterable(chunks), dtype=np.int64, count=int(lens.sum()))
    return pooled_itl_ms(flat, lens)


def meets_slo(r: RequestRecord, slo: Slo) -> bool:
    """vLLM's goodput rule: every SLO given is met (a TPOT of n ≤ 1 tokens counts as 0)."""
    if slo.ttft is not None and (r.ttft_ms is None or r.ttft_ms > slo.ttft):
        return False
    if slo.tpot is not None and (r.tpot_ms or 0.0) > slo.tpot:
        return False
    return not (slo.e2el is not None and (r.e2e_ms is None or r.e2e_ms > slo.e2el))


def _short(r: RequestRecord) -> int:
    """Tokens a successful output is missing against its max_tokens (0 if none, or unknown:
    only the server's own count — usage, or the simulator's — can tell; chunks may carry
    several tokens each, and a local tokenizer re-counting the text may merge tokens)."""
    want, got = r.planned_output_len, r.output_tokens
    if want is None or got is None or r.tokens_source not in ("usage", "sim"):
        return 0
    return max(0, want - got)


_STATS_FIELD = {50.0: "p50", 90.0: "p90", 95.0: "p95", 99.0: "p99", 99.9: "p999"}
"""The percentiles :func:`~servetune.metrics.stats.describe` computes, by Stats field."""


def selected_percentiles(
    values: dict[str, Sequence[float] | np.ndarray],
    metrics: Sequence[str],
    pcts: Sequence[float],
    known: dict[str, Stats] | None = None,
) -> dict[str, dict[str, float | None]]:
    """vLLM's ``--percentile-metrics`` × ``--metric-percentiles`` table. ``known``: the
    metrics' Stats of the same values, whose percentiles are taken instead of computed again
    when every one asked for is among them (the same figures: numpy's percentile of a value
    does not depend on the others asked for with it)."""
    out: dict[str, dict[str, float | None]] = {}
    for m in metrics:
        st = known.get(m) if known is not None else None
        if st is not None and all(p in _STATS_FIELD for p in pcts):
            out[m] = {percentile_word(p): getattr(st, _STATS_FIELD[p]) for p in pcts}
            continue
        arr = np.asarray(values.get(m, ()), dtype=np.float64)
        if arr.size:
            got = np.percentile(arr, list(pcts))
            out[m] = {percentile_word(p): float(v) for p, v in zip(pcts, got, strict=True)}
        else:
            out[m] = {percentile_word(p): None for p in pcts}
    return out


def summarize(
    records: Sequence[RequestRecord],
    warmup_s: float = 0.0,
    cooldown_s: float = 0.0,
    slo: Slo | None = None,
    percentile_metrics: Sequence[str] = DEFAULT_PERCENTILE_METRICS,
    metric_percentiles: Sequence[float] = DEFAULT_METRIC_PERCENTILES,
    itl_ms: ItlSource | None = None,
) -> Summary:
    """The client-side Summary of one run's records. ``itl_ms``: see :data:`ItlSource` (the
    simulator reads its token times from one int64 array instead of 100k+ Python ints)."""
    if not records:
        return Summary(percentiles=selected_percentiles({}, percentile_metrics, metric_percentiles))
    start = int(warmup_s * NS)
    last_end = max(r.end_ns for r in records)
    end = max(start, last_end - int(cooldown_s * NS))

    # Membership by the planned time: a request planned at t0 may leave a hair before it.
    # At the end, by whichever came first: the last request may leave a hair before its
    # planned time and fail at once, ending before it was due.
    inside = [
        r for r in records if start <= r.scheduled_ns and min(r.scheduled_ns, r.send_ns) <= end
    ]
    ok = [r for r in inside if r.ok and r.last_ns is not None and r.last_ns <= end]
    failed = [r for r in inside if r.status == "failed"]
    cancelled = [r for r in records if r.status == "cancelled"]
    excluded = len(records) - len(ok) - len(failed) - len(cancelled)

    duration = (end - start) / NS
    out_tokens = [r.output_tokens or 0 for r in ok]
    in_tokens = [r.planned_input_len for r in ok]
    total_out, total_in = int(sum(out_tokens)), int(sum(in_tokens))
    got = itl_ms(ok) if itl_ms is not None else None
    itl = got if got is not None else _itl_ms(ok)
    peak, mean_conc = _concurrency(records, start, end)

    good = None
    goodput = None
    if slo is not None and not slo.is_empty():
        good = sum(1 for r in ok if meets_slo(r, slo))
        goodput = good / duration if duration > 0 else 0.0

    def per_s(x: float) -> float:
        return x / duration if duration > 0 else 0.0

    ttft = [t for r in ok if (t := r.ttft_ms) is not None]
    tpot = [t for r in ok if (t := r.tpot_ms) is not None]
    e2el = [t for r in ok if (t := r.e2e_ms) is not None]
    shorts = [m for r in ok if (m := _short(r)) > 0]
    classes = Counter(r.failure_class or "other" for r in failed)
    stats = {"ttft": describe(ttft), "tpot": describe(tpot), "itl": describe(itl)}
    stats["e2el"] = describe(e2el)

    return Summary(
        completed=len(ok),
        failed=len(failed),
        cancelled=len(cancelled),
        excluded=excluded,
        window_start_s=start / NS,
        window_end_s=end / NS,
        duration_s=duration,
        total_input_tokens=total_in,
        total_output_tokens=total_out,
        request_throughput=per_s(len(ok)),
        output_throughput=per_s(total_out),
        total_token_throughput=per_s(total_out + total_in),
        request_goodput=goodput,
        good_requests=good,
        max_concurrent_requests=peak,
        mean_concurrency=mean_conc,
        ttft=stats["ttft"],
        tpot=stats["tpot"],
        itl=stats["itl"],
        e2el=stats["e2el"],
        ttft_from_scheduled=describe(
            [t for r in ok if (t := r.ttft_from_scheduled_ms) is not None]
        ),
        e2el_from_scheduled=describe([t for r in ok if (t := r.e2e_from_scheduled_ms) is not None]),
        output_tokens_per_request=describe(out_tokens, unit="tokens", ci=False),
        input_tokens_per_request=describe(in_tokens, unit="tokens", ci=False),
        tokens_source=dict(Counter(r.tokens_source or "unknown" for r in ok)),
        errors=dict(Counter((r.error or "unknown")[:200] for r in failed)),
        error_classes=dict(classes.most_common()),
        short_outputs=len(shorts),
        short_output_tokens=int(sum(shorts)),
        cache=cache_figures(ok),
        sessions=session_figures(records, inside, ok),
        percentiles=selected_percentiles(
            {"ttft": ttft, "tpot": tpot, "itl": itl, "e2el": e2el},
            percentile_metrics,
            metric_percentiles,
            stats,
        ),
    )


def assess_failures(
    records: Sequence[RequestRecord], max_share: float = DEFAULT_MAX_FAILURE_RATE
) -> Failures:
    """The failure verdict over every request that ended (cancelled ones excluded; warm-up and
    cool-down included: a failure is a failure whenever it happens)."""
    ended = [r for r in records if r.status != "cancelled"]
    failed = [r for r in ended if r.status == "failed"]
    classes: Counter[str] = Counter()
    examples: dict[str, str] = {}
    for r in failed:
        cls = r.failure_class or "other"
        classes[cls] += 1
        examples.setdefault(cls, (r.error or cls)[:300])
    share = len(failed) / len(ended) if ended else 0.0
    out = Failures(
        requests=len(ended),
        failed=len(failed),
        share=share,
        max_share=max_share,
        classes=dict(classes.most_common()),
        examples={c: examples[c] for c, _ in classes.most_common()},
    )
    out.verdict = failure_verdict(out)
    return out


def failure_verdict(f: Failures) -> str:
    """One sentence on the failures of a run."""
    if not f.requests:
        return "no request ended"
    if not f.failed:
        return f"all {f.requests} requests succeeded"
    why = ", ".join(f"{n} {c}" for c, n in f.classes.items())
    line = f"{f.failed} of {f.requests} requests failed ({f.share:.1%}: {why})"
    if f.over:
        return line + f", above the {f.max_share:.0%} allowed (--max-failure-rate)"
    return line + f", within the {f.max_share:.0%} allowed (--max-failure-rate)"


def empty_window(cfg: BenchConfig, summary: Summary, failures: Failures) -> str | None:
    """Why a run measured nothing although requests succeeded: its warm-up and cool-down
    (``--warmup``/``--cooldown``) left no request in the summary's window. None otherwise."""
    if summary.completed or failures.requests == failures.failed:
        return None
    if cfg.warmup_s <= 0 and cfg.cooldown_s <= 0:
        return None
    return (
        f"no request falls in the measured window: --warmup {cfg.warmup_s:g} s and "
        f"--cooldown {cfg.cooldown_s:g} s cover the whole run; the summary measures nothing "
        "(shorten them, or send more requests)"
    )


def run_status(
    failures: Failures, interrupted: bool = False, measured_nothing: bool = False
) -> RunStatus:
    """What a finished run's status is: interrupted, else by its failure share (see
    :data:`servetune.results.schema.RunStatus`); a run whose measured window holds no request
    (:func:`empty_window`) failed as a measurement, whatever its requests did."""
    if interrupted:
        return "interrupted"
    if failures.requests == 0 or measured_nothing:
        return "failed"
    if not failures.over:
        return "complete"
    return "failed" if failures.share >= 0.5 else "degraded"


METRIC_DEFINITIONS: dict[str, str] = {
    "clock": "time.perf_counter_ns() (CLOCK_MONOTONIC), shared by all worker processes",
    "ttft": "first SSE chunk with non-empty choices − send (vLLM bench serve's rule; "
    "a chat role-only opening chunk counts, an empty-text chunk counts)",
    "e2el": "last SSE chunk with non-empty choices − send",
    "tpot": "(e2el − ttft) / (output_tokens − 1), for output_tokens > 1 (vLLM's definition)",
    "itl": "gaps between consecutive content chunks, pooled over requests; a chunk carrying "
    "k tokens is one gap (vLLM's ITL, not AIPerf/GuideLLM's, which is our TPOT)",
    "send_lag": "send − eligible: the client's own lateness (eligible = scheduled, or the "
    "moment the concurrency cap released the request)",
    "queue_delay": "send − scheduled: what a user waits before the request leaves the client",
    "ttft_from_scheduled": "first token − scheduled (coordinated omission included)",
    "e2el_from_scheduled": "last token − scheduled",
    "output_tokens": "usage.completion_tokens (stream_options.include_usage); else the text "
    "counted by --tokenizer; else content chunks (warned); the source is in each record's "
    "tokens_source",
    "throughput": "completed requests and tokens over the measured window "
    "(warm-up and cool-down excluded) / window length",
    "goodput": "requests meeting every SLO given (ttft, tpot, e2el in ms) / window length",
    "percentiles": "linear interpolation (numpy); p99_ci = 95% bootstrap interval",
    "input_tokens": "planned prompt length (as vLLM bench serve counts it)",
    "failed": "no whole response; error_class says why (server_error: 5xx, an error object, "
    "finish_reason abort/error; rate_limited, "
    "client_error, connection_refused, connection_reset, timeout, truncated: no finish_reason "
    "nor [DONE], malformed_event: an event that does not parse, no_output, protocol_error); "
    "partial timings kept in the record, out of every figure",
    "status": "failures.share = failed / ended (whole run) vs --max-failure-rate: complete, "
    "degraded (over it, most succeeded), failed (over it, fewer than half succeeded)",
    "short_outputs": "successful requests with fewer output tokens than max_tokens asked",
    "cached_tokens": "usage.prompt_tokens_details.cached_tokens of each answer (vLLM with "
    "--enable-prompt-tokens-details, SGLang, the simulated engine); cache.hit_rate = "
    "Σ cached_tokens / Σ usage.prompt_tokens over the successful requests that report it",
    "sessions": "a session's turn k is due when turn k−1's response ended plus the think time "
    "(its scheduled time); by_turn: TTFT/TPOT percentiles per turn index; session_*_mean: "
    "percentiles over sessions of each session's mean",
}
