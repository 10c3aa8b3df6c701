"""The report of a `servetune watch --record` directory: what was recorded, diagnose's verdict
over the whole recording, the findings as they started and stopped while watching, and the
server's figures over time (the engine's gauges, token rates, latency percentiles of the
histograms over the watch's sliding window) with the findings' spans shaded."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from servetune.diagnose.window import diagnose_recording
from servetune.errors import ResultError, ServetuneError
from servetune.metrics import histograms as hg
from servetune.report.figures import (
    GREY,
    KV,
    PREEMPT,
    RUNNING,
    TOKENS,
    TPOT,
    TTFT,
    WAITING,
    Plot,
    new_figure,
    style_axes,
)
from servetune.report.findings import DiagnoseView, view_of
from servetune.report.page import figure_of, render_page, write_page
from servetune.report.server_plot import counter_rate
from servetune.results import server_series as ss
from servetune.results.io import read_server_series
from servetune.results.server_series import ServerSample
from servetune.results.watch_file import WatchRecording, read_watch_recording

HTML_FILE = "report.html"
_SPAN_COLOURS = {"bottleneck": "#fbe3e3", "warning": "#fdf1d6", "advisory": "#e3eef9"}


def _gauge(samples: list[ServerSample], concept: str) -> tuple[np.ndarray, np.ndarray]:
    pts = [(s.t, s.values[concept]) for s in samples if concept in s.values]
    arr = np.array(pts, dtype=float) if pts else np.zeros((0, 2))
    return arr[:, 0], arr[:, 1]


def _spans(rec: WatchRecording, end: float) -> list[tuple[float, float, str, str]]:
    """(start, stop, rule, kind) of every finding while watching: from when its rule began to
    hold to when it last held (``since``; the events themselves come the hold time later)."""
    open_: dict[str, tuple[float, str]] = {}
    out: list[tuple[float, float, str, str]] = []
    for e in rec.events:
        t = e.t if e.since is None else e.since
        if e.event == "start":
            open_[e.rule] = (t, e.kind)
        elif e.rule in open_:
            t0, kind = open_.pop(e.rule)
            out.append((t0, t, e.rule, kind))
    out += [(t0, end, rule, kind) for rule, (t0, kind) in open_.items()]
    return out


def _shade(ax: object, spans: list[tuple[float, float, str, str]]) -> None:
    for t0, t1, _rule, kind in spans:
        ax.axvspan(t0, t1, color=_SPAN_COLOURS.get(kind, "#eeeeee"), zorder=0)  # type: ignore[attr-defined]


def server_plot(samples: list[ServerSample], rec: WatchRecording) -> Plot:
    fig = new_figure(
        11.0, 6.0, left=0.07, right=0.99, bottom=0.09, top=0.94, wspace=0.18, hspace=0.32
    )
    axes = fig.subplots(2, 2, sharex=True).ravel()
    spans = _spans(rec, samples[-1].t)
    t, kv = _gauge(samples, ss.KV_CACHE_USAGE)
    ax = axes[0]
    style_axes(ax)
    ax.set_title("KV-cache use (%)", fontsize=10)
    if kv.size:
        ax.plot(t, kv * 100, color=KV, lw=1.4)
        ax.set_ylim(0, 105)
    else:
        ax.text(
            0.5, 0.5, "not exposed by this server", transform=ax.transAxes, ha="center", color=GREY
        )
    ax = axes[1]
    style_axes(ax)
    ax.set_title("requests running / waiting", fontsize=10)
    for concept, colour, label in (
        (ss.RUNNING, RUNNING, "running"),
        (ss.WAITING, WAITING, "waiting"),
    ):
        tt, v = _gauge(samples, concept)
        if v.size:
            ax.plot(tt, v, color=colour, lw=1.4, label=label)
    ax.legend(fontsize=7, loc="upper left")
    ax.set_ylim(bottom=0)
    ax = axes[2]
    style_axes(ax)
    ax.set_title("tokens per second", fontsize=10)
    for concept, colour, label in (
        (ss.PROMPT_TOKENS_TOTAL, GREY, "prompt"),
        (ss.GENERATION_TOKENS_TOTAL, TOKENS, "generated"),
    ):
        tt, v = _gauge(samples, concept)
        if v.size:
            ax.plot(tt, counter_rate(tt, v), color=colour, lw=1.2, label=label)
    ax.legend(fontsize=7, loc="upper left")
    ax.set_ylim(bottom=0)
    ax = axes[3]
    style_axes(ax)
    ax.set_title("preemptions per second", fontsize=10)
    tt, v = _gauge(samples, ss.PREEMPTIONS_TOTAL)
    if v.size:
        ax.plot(tt, counter_rate(tt, v), color=PREEMPT, lw=1.2)
    else:
        ax.text(
            0.5, 0.5, "not exposed by this server", transform=ax.transAxes, ha="center", color=GREY
        )
    ax.set_ylim(bottom=0)
    for a in axes:
        _shade(a, spans)
    for a in axes[2:]:
        a.set_xlabel("seconds since the watch started")
    return Plot(
        "server",
        "The engine over the recording",
        "Its own gauges and counter rates, sample by sample; shaded: findings while watching "
        "(red a bottleneck, amber a warning).",
        fig,
    )


def latency_plot(samples: list[ServerSample], rec: WatchRecording) -> Plot | None:
    """P50/P99 TTFT and TPOT over the watch's sliding window, at every sample."""
    have = [
        c for c in (ss.TTFT_SECONDS, ss.TPOT_SECONDS) if any(c in s.histograms for s in samples)
    ]
    if not have:
        return None
    fig = new_figure(11.0, 3.4, left=0.07, right=0.99, bottom=0.15, top=0.88, wspace=0.18)
    axes = np.atleast_1d(fig.subplots(1, len(have)))
    spans = _spans(rec, samples[-1].t)
    for ax, concept in zip(axes, have, strict=True):
        style_axes(ax)
        name = "TTFT" if concept == ss.TTFT_SECONDS else "TPOT"
        ax.set_title(f"{name} (ms) over {rec.window_s:g} s windows", fontsize=10)
        ts: list[float] = []
        p50: list[float] = []
        p99: list[float] = []
        j = 0
        for i, s in enumerate(samples):
            if concept not in s.histograms:
                continue
            while j < len(samples) - 1 and samples[j + 1].t <= s.t - rec.window_s:
                j += 1
            # every snapshot of the window: a restart inside it counts the new process only
            h = hg.increase(
                [x.histograms[concept] for x in samples[j : i + 1] if concept in x.histograms]
            )
            if h is None:
                continue
            a, b = hg.quantile(0.5, h), hg.quantile(0.99, h)
            if a is None or b is None:
                continue
            ts.append(s.t)
            p50.append(a * 1000)
            p99.append(b * 1000)
        colour = TTFT if name == "TTFT" else TPOT
        ax.plot(ts, p99, color=colour, lw=1.5, label="P99")
        ax.plot(ts, p50, color=colour, lw=1.0, ls="--", label="P50")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=7, loc="upper left")
        ax.set_xlabel("seconds since the watch started")
        _shade(ax, spans)
    return Plot(
        "latency",
        "Latency percentiles from the server's histograms",
        "Interpolated within the engine's buckets (as Prometheus' histogram_quantile), over "
        "the watch's sliding window ending at each sample.",
        fig,
    )


def build_recording_report(path: Path, out_dir: Path | None = None, *, png: bool = True) -> Path:
    rec = read_watch_recording(path)
    try:
        samples = read_server_series(path)
    except ServetuneError as exc:
        raise ResultError(f"{path}: the samples cannot be read ({exc.message})") from exc
    if len(samples) < 2:
        raise ResultError(f"{path}: fewer than two samples were recorded")
    out = out_dir or path
    out.mkdir(parents=True, exist_ok=True)
    notes: list[str] = []
    try:
        diagnosis: DiagnoseView | None = view_of(diagnose_recording(path))
    except ServetuneError as exc:
        diagnosis = None
        notes.append(f"diagnose could not read the recording: {exc.message}")
    plots = (server_plot(samples, rec), latency_plot(samples, rec))
    figures = [figure_of(p, out if png else None) for p in plots if p is not None]
    html = render_page(
        "recording.html.j2",
        title=f"Recording: {rec.engine or 'server'} at {rec.metrics_url}",
        path=str(path),
        rec=rec,
        diagnosis=diagnosis,
        figures=figures,
        notes=notes,
    )
    target = write_page(out / HTML_FILE, html)
    return target
