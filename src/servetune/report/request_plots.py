"""Plots of each request: latency distributions per level (TTFT, TPOT, E2E), the client's
send lag (per level and its distribution), and one run's latencies over time."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from servetune.report.data import LevelData, ReportData
from servetune.report.figures import (
    E2E,
    GREY,
    KNEE,
    TTFT,
    Plot,
    ecdf,
    level_colour,
    level_ticks,
    log_if_wide,
    new_figure,
    style_axes,
)


def cdf_plot(levels: Sequence[LevelData]) -> Plot | None:
    usable = [lv for lv in levels if lv.latencies is not None and lv.latencies.e2e.size]
    if not usable:
        return None
    fig = new_figure(11.0, 3.9, left=0.06, right=0.99, bottom=0.14, top=0.91, wspace=0.25)
    axes = fig.subplots(1, 3)
    n = len(usable)
    for ax, (attr, title) in zip(
        axes, (("ttft", "TTFT"), ("tpot", "TPOT"), ("e2e", "E2E latency")), strict=True
    ):
        style_axes(ax)
        all_vals: list[float] = []
        for i, lv in enumerate(usable):
            assert lv.latencies is not None
            vals = getattr(lv.latencies, attr)
            vals = vals[np.isfinite(vals) & (vals > 0)]
            if not vals.size:
                continue
            x, y = ecdf(vals)
            colour = level_colour(i, n)
            ax.plot(x, y, color=colour, lw=1.5, label=lv.label)
            all_vals.extend([float(vals.min()), float(vals.max())])
        ax.axhline(0.99, color=GREY, ls=":", lw=1)
        log_if_wide(ax, all_vals, "x", 20.0)
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


def send_lag_plot(data: ReportData) -> Plot | None:
    levels = [lv for lv in data.levels if lv.latencies is not None and lv.latencies.send_lag.size]
    if not levels:
        return None
    fig = new_figure(10.0, 3.6, left=0.07, right=0.98, bottom=0.15, top=0.9, wspace=0.2)
    left, right = fig.subplots(1, 2)
    for ax in (left, right):
        style_axes(ax)
    if data.kind == "sweep":
        xs = [lv.row.load for lv in levels if math.isfinite(lv.row.load)]
        fin = [lv for lv in levels if math.isfinite(lv.row.load)]
        if fin:
            lat = [lv.latencies for lv in fin]
            for q, style, color in ((99, "o-", KNEE), (50, "o--", TTFT)):
                ys = [float(np.percentile(x.send_lag, q)) for x in lat if x is not None]
                left.plot(xs, ys, style, color=color, label=f"P{q}")
            log_if_wide(left, xs, "x")
            level_ticks(left, xs)
            left.set_xlabel("offered req/s" if data.mode == "rate" else "concurrency cap")
            left.legend(fontsize=7)
        left.set_title("client send lag per level (ms)", fontsize=10)
    else:
        lat0 = levels[0].latencies
        assert lat0 is not None
        left.plot(lat0.send_s, lat0.send_lag, ".", color=TTFT, ms=2)
        left.set_xlabel("send time (s)")
        left.set_title("client send lag of each request (ms)", fontsize=10)
    for i, lv in enumerate(levels):
        assert lv.latencies is not None
        x, y = ecdf(lv.latencies.send_lag)
        colour = level_colour(i, len(levels))
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
    fig = new_figure(8.0, 3.6, left=0.09, bottom=0.15, top=0.95)
    ax = fig.add_subplot()
    style_axes(ax)
    ax.plot(lat.ok_send_s, lat.e2e, ".", color=E2E, ms=3, label="E2E")
    ax.plot(lat.ok_send_s, lat.ttft, ".", color=TTFT, ms=3, label="TTFT")
    finite = [float(v) for v in np.concatenate([lat.e2e, lat.ttft]) if np.isfinite(v)]
    log_if_wide(ax, finite, "y", 20.0)
    ax.set_xlabel("send time (s)")
    ax.set_ylabel("ms")
    ax.legend(fontsize=7, loc="upper left")
    return Plot(
        "timeline",
        "Latency of each request over the run",
        "TTFT and E2E by send time: a rising band means a queue building up.",
        fig,
    )
