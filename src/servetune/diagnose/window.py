"""The seed's rules over a window of server metrics alone: what `servetune watch` evaluates
live (a sliding window) and what a `watch --record` recording is diagnosed with.

No client took part, so the figures a load test measures per request come from the server's
own metrics over the window, and the rules about the client itself do not apply:

- request throughput = finished requests / s; output and total token throughput from the
  token counters; TTFT, TPOT, ITL, E2E percentiles from the engine's histograms (bucket
  interpolated, :mod:`servetune.metrics.histograms`);
- requests in flight = running + waiting (the engine's gauges); arrivals = finished / s +
  the in-flight trend (flow balance over the window), which stands for the offered rate; the
  ``overloaded`` rule's figure (growth of the requests in flight over the second half ÷
  arrivals) is the *smaller* of the growths over the window's third and fourth quarters: a
  server past capacity piles requests up steadily, in both, while a step up in traffic fills
  the engine once, within one quarter (so a rise in load is not called an overload); and the
  rise over the whole window must be told from the arrivals' own noise
  (``inflight_growth_z``, :mod:`servetune.diagnose.growth` — a window has no ramp-up from an
  idle server, so all of it counts as "past the ramp-up");
- prompt lengths are unknown (no per-request records): the rules that need them (long
  prompts blocking) cannot tell live, and say so.

``client_behind``, ``burst``, ``failures``, ``oom``, ``server_gone`` and
``prefix_cache_inflated`` judge a load test — its client, its failed requests, its own
prompts — which a window of server metrics does not have.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from servetune.diagnose.evaluate import evaluate
from servetune.diagnose.figures.config import derived_figures, knob_figures
from servetune.diagnose.figures.server import read_series_tolerant, server_figures
from servetune.diagnose.figures.table import Figures
from servetune.diagnose.growth import growth_z, late_growth, slope
from servetune.diagnose.knobs import KnownConfig
from servetune.diagnose.model import Diagnosis, Finding
from servetune.diagnose.rules import RULES, Rule
from servetune.diagnose.run import run_diagnosis
from servetune.errors import ResultError
from servetune.metrics.server_summary import summarize_server
from servetune.results import server_series as ss
from servetune.results.environment import this_machine
from servetune.results.schema import (
    BenchConfig,
    ClientHealth,
    RunResult,
    ServerInfo,
    Summary,
    TargetInfo,
)
from servetune.results.server_series import ServerSample
from servetune.results.watch_file import read_watch_recording

CLIENT_RULES = (
    "client_behind",
    "burst",
    "failures",
    "oom",
    "server_gone",
    "prefix_cache_inflated",
)
WINDOW_RULES: tuple[Rule, ...] = tuple(r for r in RULES if r.id not in CLIENT_RULES)
"""The rules a window of server metrics can judge (one rule table: diagnose's)."""


def _num(d: dict[str, object], key: str) -> float | None:
    v = d.get(key)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _inflight(samples: Sequence[ServerSample]) -> tuple[np.ndarray, np.ndarray]:
    have = [s for s in samples if ss.RUNNING in s.values or ss.WAITING in s.values]
    return (
        np.array([s.t for s in have], dtype=float),
        np.array(
            [s.values.get(ss.RUNNING, 0.0) + s.values.get(ss.WAITING, 0.0) for s in have],
            dtype=float,
        ),
    )


def window_figures(
    samples: Sequence[ServerSample],
    start: float,
    end: float,
    known: KnownConfig | None = None,
    server_summary: dict[str, object] | None = None,
) -> Figures:
    """Diagnose's figures over [start, end] (run-clock seconds) from server samples alone.

    ``server_summary``: what the scraper read once (the engine's cache configuration), so the
    KV pool's size is known as it is for a run."""
    summ = summarize_server(samples, start, end)
    win = [s for s in samples if start <= s.t <= end]
    finished = _num(summ, "requests_finished_per_s")
    dur = max(0.0, end - start)
    completed = round(finished * dur) if finished is not None else 0
    gen = _num(summ, "generation_tokens_per_s")
    prompt = _num(summ, "prompt_tokens_per_s")
    shim = RunResult(
        label="window",
        config=BenchConfig(base_url="server metrics"),
        environment=this_machine([]),
        target=TargetInfo(base_url="server metrics", model=""),
        client_health=ClientHealth(),
        summary=Summary(
            completed=completed,
            window_start_s=start,
            window_end_s=end,
            duration_s=dur,
            total_input_tokens=round((prompt or 0.0) * dur),
            total_output_tokens=round((gen or 0.0) * dur),
            request_throughput=finished or 0.0,
            output_throughput=gen or 0.0,
            total_token_throughput=(gen or 0.0) + (prompt or 0.0),
        ),
        server=ServerInfo(summary=dict(server_summary or {})),
    )
    fig = Figures(config=known or KnownConfig(), label="window")
    knob_figures(fig, shim)
    server_figures(fig, shim, samples, None)
    no_client = "no per-request records: a window of server metrics has no prompt lengths"
    fig.put("completed", completed)
    if finished:
        fig.put("request_throughput", finished)
    elif finished is not None:
        # a window shorter than a request: nothing could finish in it, which says nothing
        # about the server's throughput (and a rate limit of "75% of 0 req/s" is no advice)
        fig.miss(
            "request_throughput",
            "no request finished within the window (it is shorter than a request takes)",
        )
    fig.put("output_throughput", gen)
    if gen is not None and prompt is not None:
        fig.put("total_token_throughput", gen + prompt)
    for key, name in (
        ("ttft_ms", "ttft"),
        ("tpot_ms", "tpot"),
        ("itl_ms", "itl"),
        ("e2e_ms", "e2e"),
    ):
        h = summ.get(key)
        why = f"the engine's {name.upper()} histogram is not exposed or had no request"
        p50 = _num(h, "p50") if isinstance(h, dict) else None
        p99 = _num(h, "p99") if isinstance(h, dict) else None
        fig.put(f"{name}_p50_ms", p50, why)
        fig.put(f"{name}_p99_ms", p99, why)
    p50, p99 = fig.get("ttft_p50_ms"), fig.get("ttft_p99_ms")
    if p50 and p99 is not None:
        fig.put("ttft_spike_ratio", p99 / p50)
    for name in ("input_spread", "input_len_p50", "input_len_max", "stalls", "itl_max_ms"):
        fig.miss(name, no_client)
    ts, inflight = _inflight(win)
    growth = slope(ts, inflight)
    if growth is not None and finished is not None:
        arrivals = finished + growth
        fig.put("offered_rate", arrivals)
        fig.put("inflight_growth_per_s", growth)
        fig.put("inflight_mean", float(inflight.mean()))
        # a window has no ramp-up from an idle server: the whole window is "past the ramp-up"
        fig.put("inflight_growth_z", growth_z(growth * dur, finished * dur))
        late = late_growth(ts, inflight, start, end)
        if late is not None and arrivals > 0:
            fig.put("inflight_growth_late_per_s", late)
            fig.put("inflight_growth_late_share", late / arrivals)
        fig.texts["sending_window"] = f"{start:.1f}–{end:.1f} s"
    else:
        why = "running/waiting not exposed, or too few samples for a trend"
        for name in (
            "offered_rate",
            "inflight_growth_per_s",
            "inflight_growth_late_share",
            "inflight_growth_z",
        ):
            fig.miss(name, why)
    fig.miss("served_deficit_z", "no per-request records (the in-flight trend judges instead)")
    if not math.isnan(dur):
        fig.put("duration_s", dur)
    derived_figures(fig, shim)
    return fig


def evaluate_window(
    samples: Sequence[ServerSample],
    start: float,
    end: float,
    known: KnownConfig | None = None,
    server_summary: dict[str, object] | None = None,
) -> tuple[Figures, list[Finding]]:
    """The window's figures and the findings of :data:`WINDOW_RULES` over them."""
    fig = window_figures(samples, start, end, known, server_summary)
    return fig, evaluate(fig, WINDOW_RULES)


def diagnose_recording(directory: Path, override: KnownConfig | None = None) -> Diagnosis:
    """Diagnose a `servetune watch --record` directory over its whole recording."""
    rec = read_watch_recording(directory)
    samples, err = read_series_tolerant(directory)
    if err or len(samples) < 2:
        raise ResultError(
            f"{directory}: {err or 'fewer than two samples recorded'}",
            hint="a recording needs at least two scrapes of /metrics",
        )
    known = override
    if known is None or not (known.known or known.gpu or known.model):
        try:
            known = KnownConfig.model_validate(rec.config) if rec.config else KnownConfig()
        except ValueError:
            known = KnownConfig()
    start, end = samples[0].t, samples[-1].t
    fig, findings = evaluate_window(samples, start, end, known, rec.server_summary)
    starts = [e for e in rec.events if e.event == "start"]
    notes = [
        f"a recording of servetune watch ({rec.metrics_url}, {rec.engine} {rec.engine_version}, "
        f"{end - start:.0f} s, {len(samples)} samples): the server's metrics only, no client "
        "records — the rules that judge a load test's client are not applied"
    ]
    if starts:
        notes.append(
            "while watching ("
            + f"{rec.window_s:g} s windows, findings held {rec.hold_s:g} s): "
            + "; ".join(f"{e.rule} started at t={e.t:.0f} s" for e in starts[:8])
        )
    return run_diagnosis(findings, fig, known, notes, str(directory))
