"""The report's plots (matplotlib, no pyplot: one Figure object each, Agg for PNG and the SVG
backend for inline SVG). Colours are fixed so that a reader — and the browser test — can tell
the metrics apart: TTFT blue, TPOT orange, E2E green, the knee red."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullFormatter

from servetune.report.data import LevelData, ReportData
from servetune.results import server_series as ss
from servetune.results.sweep_schema import LevelRow, MetricName, SweepResult
from servetune.sweep import fmt
from servetune.sweep.slo import slo_items

TTFT = "#1f77b4"
TPOT = "#ff7f0e"
E2E = "#2ca02c"
KNEE = "#d62728"
GREY = "#7f7f7f"
TOKENS = "#9467bd"
RUNNING = "#1f77b4"
WAITING = "#ff7f0e"
KV = "#2ca02c"
PREEMPT = "#d62728"
METRIC_COLOURS = {"ttft": TTFT, "tpot": TPOT, "e2el": E2E}
METRIC_TITLES = {"ttft": "TTFT", "tpot": "TPOT", "e2el": "E2E latency"}
_CDF_POINTS = 300


@dataclass
class Plot:
    name: str
    """File stem of the PNG (``throughput`` → ``throughput.png``)."""
    title: str
    caption: str
    fig: Figure


def _figure(width: float, height: float, **margins: float) -> Figure:
    # Fixed margins: constrained layout costs more than the drawing itself.
    fig = Figure(figsize=(width, height), dpi=100)
    spec = {"left": 0.08, "right": 0.97, "bottom": 0.14, "top": 0.9, "wspace": 0.3, "hspace": 0.35}
    spec.update(margins)
    fig.subplots_adjust(**spec)
    return fig


def _style(ax: Axes) -> None:
    ax.grid(True, which="major", alpha=0.3)
    ax.spines["top"].set_visible(False)
    ax.spines["right"].set_visible(False)


def _plain(v: float, _pos: int | None = None) -> str:
    return fmt.num(v)


def _log_if_wide(ax: Axes, values: Sequence[float], axis: str, ratio: float = 8.0) -> None:
    """Log scale when the values span ``ratio``× or more, with plain-number tick labels."""
    vals = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    if len(vals) < 2 or max(vals) / min(vals) < ratio:
        return
    target = ax.xaxis if axis == "x" else ax.yaxis
    if axis == "x":
        ax.set_xscale("log")
    else:
        ax.set_yscale("log")
    target.set_major_formatter(FuncFormatter(_plain))
    target.set_minor_formatter(NullFormatter())


def _level_ticks(ax: Axes, xs: Sequence[float]) -> None:
    """Ticks at the swept loads themselves, thinned so that labels do not collide."""
    uniq = sorted({x for x in xs if math.isfinite(x) and x > 0})
    if len(uniq) < 2:
        return
    log = ax.get_xscale() == "log"
    pos = [math.log(x) if log else x for x in uniq]
    gap = (pos[-1] - pos[0]) * 0.045
    keep = [0]
    for i in range(1, len(uniq)):
        if pos[i] - pos[keep[-1]] >= gap:
            keep.append(i)
    if keep[-1] != len(uniq) - 1:
        keep[-1] = len(uniq) - 1  # the top level is always labelled
    ticks = [uniq[i] for i in keep]
    ax.set_xticks(ticks, [fmt.num(x) for x in ticks])
    ax.xaxis.set_minor_formatter(NullFormatter())


def _finite_rows(sweep: SweepResult) -> list[LevelRow]:
    return [r for r in sweep.measured_rows() if math.isfinite(r.load) and r.completed > 0]


def _by_load(rows: Sequence[LevelRow]) -> list[list[LevelRow]]:
    """Rows grouped by load (``--repeats`` runs of one level together), in load order."""
    groups: dict[float, list[LevelRow]] = {}
    for r in rows:
        groups.setdefault(r.load, []).append(r)
    return [groups[k] for k in sorted(groups)]


def _median(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return float(np.median(vals)) if vals else None


# --- sweep-level plots -------------------------------------------------------------------
def throughput_plot(sweep: SweepResult) -> Plot | None:
    rows = _finite_rows(sweep)
    if not rows:
        return None
    mode = sweep.config.mode
    groups = _by_load(rows)
    x = [g[0].load for g in groups]

    def med(attr: str) -> list[float]:
        vals = [_median([getattr(r, attr) for r in g]) for g in groups]
        return [math.nan if v is None else v for v in vals]

    fig = _figure(8.0, 4.2, left=0.09, right=0.89, bottom=0.13, top=0.95)
    ax = fig.add_subplot()
    _style(ax)
    ax.plot(x, med("request_throughput"), "o-", color=TTFT, lw=2, label="achieved req/s")
    if len(groups) < len(rows):
        ax.plot(
            [r.load for r in rows],
            [r.request_throughput for r in rows],
            ".",
            color=TTFT,
            alpha=0.5,
            label="each run (--repeats)",
        )
    if mode == "rate":
        ax.plot(x, x, "--", color=GREY, lw=1, label="offered (ideal)")
    if any(r.request_goodput is not None for r in rows):
        ax.plot(
            x,
            [0.0 if math.isnan(v) else v for v in med("request_goodput")],
            "^-",
            color=E2E,
            lw=1.5,
            label="goodput (meets SLOs)",
        )
    probe = next((r for r in sweep.rows if r.role == "probe"), None)
    if probe is not None:
        ax.axhline(
            probe.request_throughput,
            ls=":",
            color=GREY,
            label=f"probe, all at once: {fmt.num(probe.request_throughput)} req/s",
        )
    knee = sweep.knee
    if knee and knee.status == "found" and knee.offered and knee.throughput:
        ax.axvline(knee.offered, color=KNEE, lw=1.5, ls="-", alpha=0.8)
        ax.plot(
            [knee.offered],
            [knee.throughput],
            "D",
            color=KNEE,
            ms=9,
            label=f"knee: {fmt.num(knee.throughput)} req/s",
        )
    slo = sweep.slo_max
    if slo and slo.status == "found" and slo.offered:
        ax.axvline(
            slo.offered,
            color=GREY,
            ls="-.",
            lw=1.2,
            label=f"SLO-max: {fmt.load(slo.offered, mode)}",
        )
    ax2 = ax.twinx()
    ax2.plot(x, med("output_throughput"), "s:", color=TOKENS, alpha=0.8, label="output tok/s")
    ax2.set_ylabel("output tokens/s", color=TOKENS)
    ax2.tick_params(axis="y", colors=TOKENS)
    top = max(r.request_throughput for r in rows)
    ax.set_ylim(0, top * 1.35)  # the ideal line may leave the plot: the curve is what matters
    ax2.set_ylim(0, max(r.output_throughput for r in rows) * 1.35 or 1.0)
    _log_if_wide(ax, x, "x")
    _level_ticks(ax, [r.load for r in rows if r.role == "level"])
    ax.set_xlabel("offered request rate (req/s)" if mode == "rate" else "concurrency cap")
    ax.set_ylabel("completed requests/s")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, loc="upper left", fontsize=8, framealpha=0.85)
    return Plot(
        "throughput",
        "Throughput against offered load",
        "Achieved request throughput (left axis) and output tokens/s (right axis) per level; "
        "where the curve leaves the dashed line the server stops keeping up.",
        fig,
    )


def latency_plot(sweep: SweepResult) -> Plot | None:
    rows = [r for r in sweep.measured_rows() if r.completed > 0]
    if not rows:
        return None
    fig = _figure(11.0, 3.9, left=0.06, right=0.99, bottom=0.14, top=0.91, wspace=0.22)
    axes = fig.subplots(1, 3)
    knee = sweep.knee
    slo = dict(slo_items(sweep.config.bench.goodput))
    metrics: tuple[MetricName, ...] = ("ttft", "tpot", "e2el")
    for ax, m in zip(axes, metrics, strict=True):
        _style(ax)
        colour = METRIC_COLOURS[m]
        groups = [[r for r in g if r.p99(m) is not None] for g in _by_load(rows)]
        groups = [g for g in groups if g]
        pts: list[tuple[float, float, float | None]] = []
        for g in groups:
            x = _median([r.request_throughput for r in g])
            p99 = _median([r.p99(m) for r in g])
            if x is not None and p99 is not None:
                pts.append((x, p99, _median([getattr(r, f"{m}_p50") for r in g])))
        if not pts:
            ax.set_title(f"{METRIC_TITLES[m]}: no data", fontsize=10)
            continue
        xs = [p[0] for p in pts]
        ax.plot(xs, [p[1] for p in pts], "o-", color=colour, lw=2, label="P99")
        ax.plot(xs, [p[2] for p in pts], "o--", color=colour, lw=1, alpha=0.5, ms=4, label="P50")
        if sum(len(g) for g in groups) > len(groups):
            each = [r for g in groups for r in g]
            ax.plot(
                [r.request_throughput for r in each],
                [r.p99(m) for r in each],
                ".",
                color=colour,
                alpha=0.5,
                label="P99, each run",
            )
        for r in rows:
            v = r.p99(m)
            if v is not None and r.role != "level":
                ax.annotate(
                    r.label,
                    (r.request_throughput, v),
                    fontsize=7,
                    color=GREY,
                    xytext=(3, 3),
                    textcoords="offset points",
                )
        if knee and knee.status == "found" and knee.throughput:
            ax.axvline(knee.throughput, color=KNEE, lw=1.5, alpha=0.8)
            at = knee.latency_p99_ms.get(m)
            if at is not None:
                ax.plot([knee.throughput], [at], "D", color=KNEE, ms=8, label="knee")
        if m in slo:
            ax.axhline(slo[m], color=GREY, ls="-.", lw=1, label=f"SLO {fmt.ms(slo[m])}")
        _log_if_wide(ax, [p[1] for p in pts] + [p[2] for p in pts if p[2] is not None], "y", 20.0)
        ax.set_title(f"{METRIC_TITLES[m]} (ms)", fontsize=10)
        ax.set_xlabel("achieved req/s")
        ax.legend(fontsize=7, loc="upper left")
    return Plot(
        "latency",
        "P50 / P99 latency against throughput",
        "Each point is a level; the red line and diamond mark the knee, the grey dash-dot "
        "line an SLO. Past the knee latency climbs while throughput barely moves.",
        fig,
    )


def _ecdf(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    v = np.sort(values)
    if v.size > _CDF_POINTS:
        q = np.linspace(0, 1, _CDF_POINTS)
        return np.quantile(v, q), q
    return v, np.arange(1, v.size + 1) / v.size


def cdf_plot(levels: Sequence[LevelData]) -> Plot | None:
    usable = [lv for lv in levels if lv.latencies is not None and lv.latencies.e2e.size]
    if not usable:
        return None
    from matplotlib import colormaps

    cmap = colormaps["viridis"]
    fig = _figure(11.0, 3.9, left=0.06, right=0.99, bottom=0.14, top=0.91, wspace=0.25)
    axes = fig.subplots(1, 3)
    n = len(usable)
    for ax, (attr, title) in zip(
        axes, (("ttft", "TTFT"), ("tpot", "TPOT"), ("e2e", "E2E latency")), strict=True
    ):
        _style(ax)
        all_vals: list[float] = []
        for i, lv in enumerate(usable):
            assert lv.latencies is not None
            vals = getattr(lv.latencies, attr)
            vals = vals[np.isfinite(vals) & (vals > 0)]
            if not vals.size:
                continue
            x, y = _ecdf(vals)
            colour = cmap(0.1 + 0.8 * i / max(1, n - 1)) if n > 1 else TTFT
            ax.plot(x, y, color=colour, lw=1.5, label=lv.label)
            all_vals.extend([float(vals.min()), float(vals.max())])
        ax.axhline(0.99, color=GREY, ls=":", lw=1)
        _log_if_wide(ax, all_vals, "x", 20.0)
        ax.set_title(f"{title} (ms)", fontsize=10)
        ax.set_ylabel("share of requests ≤ x")
        ax.set_ylim(0, 1.01)
    axes[-1].legend(fontsize=7, loc="lower right", ncols=1 if n <= 8 else 2)
    return Plot(
        "cdf",
        "Latency distributions per level",
        "Cumulative distribution of each request's TTFT, TPOT and E2E latency; the dotted "
        "line is P99.",
        fig,
    )


def _rate(t: np.ndarray, counter: np.ndarray) -> np.ndarray:
    if t.size < 2:
        return np.zeros_like(t)
    dt = np.diff(t)
    dc = np.diff(counter)
    dc[dc < 0] = 0  # a counter reset (server restart) is not negative work
    out = np.concatenate(([0.0], np.divide(dc, dt, out=np.zeros_like(dc), where=dt > 0)))
    return out


def _series(level: LevelData, concept: str) -> tuple[np.ndarray, np.ndarray]:
    pts = [(x.t, x.values[concept]) for x in level.series if concept in x.values]
    if not pts:
        return np.zeros(0), np.zeros(0)
    arr = np.array(pts, dtype=float)
    return arr[:, 0], arr[:, 1]


def server_plot(levels: Sequence[LevelData]) -> Plot | None:
    """KV-cache use, running, waiting and preemptions over time: one line per level."""
    levels = [lv for lv in levels if lv.series]
    if not levels:
        return None
    from matplotlib import colormaps

    cmap = colormaps["viridis"]
    fig = _figure(11.0, 6.0, left=0.07, right=0.99, bottom=0.09, top=0.94, wspace=0.18, hspace=0.32)
    axes = fig.subplots(2, 2, sharex=True).ravel()
    panels = (
        (ss.KV_CACHE_USAGE, "KV-cache use (%)", 100.0),
        (ss.RUNNING, "running requests", 1.0),
        (ss.WAITING, "waiting requests", 1.0),
        (ss.PREEMPTIONS_TOTAL, "preemptions per second", 1.0),
    )
    n = len(levels)
    single = n == 1
    for ax, (concept, title, scale) in zip(axes, panels, strict=True):
        _style(ax)
        ax.set_title(title, fontsize=10)
        drawn = False
        for i, lv in enumerate(levels):
            t, v = _series(lv, concept)
            if not v.size:
                continue
            if concept == ss.PREEMPTIONS_TOTAL:
                v = _rate(t, v)
            colour: str | tuple[float, float, float, float]
            if single:
                colour = {ss.KV_CACHE_USAGE: KV, ss.RUNNING: RUNNING, ss.WAITING: WAITING}.get(
                    concept, PREEMPT
                )
            else:
                colour = cmap(0.1 + 0.8 * i / max(1, n - 1))
            ax.plot(t, v * scale, color=colour, lw=1.4, label=lv.label)
            drawn = True
        if not drawn:
            ax.text(
                0.5,
                0.5,
                "not exposed by this server",
                transform=ax.transAxes,
                ha="center",
                color=GREY,
            )
        if concept == ss.KV_CACHE_USAGE and drawn:
            ax.set_ylim(0, 105)
        else:
            ax.set_ylim(bottom=0)
    if single:
        s = levels[0].run.summary
        for ax in axes:
            if s.window_end_s > s.window_start_s:
                ax.axvspan(s.window_start_s, s.window_end_s, color="#eeeeee", zorder=0)
    else:
        axes[1].legend(fontsize=7, loc="upper right", ncols=1 if n <= 8 else 2)
    for ax in axes[2:]:
        ax.set_xlabel("seconds since the level's start")
    return Plot(
        "server",
        "Server metrics over time" + ("" if single else ", one line per level"),
        "The server's own view (its /metrics, scraped during the run): KV-cache use, running "
        "and waiting requests, preemptions per second"
        + (" (measured window shaded)." if single else "; darker = lower load."),
        fig,
    )


def send_lag_plot(data: ReportData) -> Plot | None:
    levels = [lv for lv in data.levels if lv.latencies is not None and lv.latencies.send_lag.size]
    if not levels:
        return None
    fig = _figure(10.0, 3.6, left=0.07, right=0.98, bottom=0.15, top=0.9, wspace=0.2)
    left, right = fig.subplots(1, 2)
    for ax in (left, right):
        _style(ax)
    if data.kind == "sweep":
        xs = [lv.row.load for lv in levels if math.isfinite(lv.row.load)]
        fin = [lv for lv in levels if math.isfinite(lv.row.load)]
        if fin:
            lat = [lv.latencies for lv in fin]
            for q, style, color in ((99, "o-", KNEE), (50, "o--", TTFT)):
                ys = [float(np.percentile(x.send_lag, q)) for x in lat if x is not None]
                left.plot(xs, ys, style, color=color, label=f"P{q}")
            _log_if_wide(left, xs, "x")
            _level_ticks(left, xs)
            left.set_xlabel("offered req/s" if data.mode == "rate" else "concurrency cap")
            left.legend(fontsize=7)
        left.set_title("client send lag per level (ms)", fontsize=10)
    else:
        lat0 = levels[0].latencies
        assert lat0 is not None
        left.plot(lat0.send_s, lat0.send_lag, ".", color=TTFT, ms=2)
        left.set_xlabel("send time (s)")
        left.set_title("client send lag of each request (ms)", fontsize=10)
    from matplotlib import colormaps

    cmap = colormaps["viridis"]
    for i, lv in enumerate(levels):
        assert lv.latencies is not None
        x, y = _ecdf(lv.latencies.send_lag)
        colour = cmap(0.1 + 0.8 * i / max(1, len(levels) - 1)) if len(levels) > 1 else TTFT
        right.plot(np.maximum(x, 1e-3), y, color=colour, lw=1.2, label=lv.label)
    right.set_xscale("log")
    right.set_title("send lag distribution (ms)", fontsize=10)
    right.legend(fontsize=7, loc="lower right")
    return Plot(
        "send_lag",
        "Client send lag",
        "How late the client itself sent each request (send − eligible). Above a few "
        "milliseconds the client, not the server, shapes the load.",
        fig,
    )


def timeline_plot(level: LevelData) -> Plot | None:
    lat = level.latencies
    if lat is None or not lat.ok_send_s.size:
        return None
    fig = _figure(8.0, 3.6, left=0.09, bottom=0.15, top=0.95)
    ax = fig.add_subplot()
    _style(ax)
    ax.plot(lat.ok_send_s, lat.e2e, ".", color=E2E, ms=3, label="E2E")
    ax.plot(lat.ok_send_s, lat.ttft, ".", color=TTFT, ms=3, label="TTFT")
    finite = [float(v) for v in np.concatenate([lat.e2e, lat.ttft]) if np.isfinite(v)]
    _log_if_wide(ax, finite, "y", 20.0)
    ax.set_xlabel("send time (s)")
    ax.set_ylabel("ms")
    ax.legend(fontsize=7, loc="upper left")
    return Plot(
        "timeline",
        "Latency of each request over the run",
        "TTFT and E2E by send time: a rising band means a queue building up.",
        fig,
    )


def sweep_plots(data: ReportData) -> list[Plot]:
    assert data.sweep is not None
    plots = [
        throughput_plot(data.sweep),
        latency_plot(data.sweep),
        cdf_plot(data.levels),
        send_lag_plot(data),
    ]
    plots.append(server_plot(data.levels))
    return [p for p in plots if p is not None]


def run_plots(data: ReportData) -> list[Plot]:
    lv = data.levels[0]
    plots = [cdf_plot([lv]), timeline_plot(lv), server_plot([lv]), send_lag_plot(data)]
    return [p for p in plots if p is not None]
