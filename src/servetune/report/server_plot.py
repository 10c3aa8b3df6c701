"""The server's own view over time (its /metrics, scraped during the run): KV-cache use,
running and waiting requests, preemptions per second — one line per level."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from servetune.report.data import LevelData
from servetune.report.figures import (
    GREY,
    KV,
    PREEMPT,
    RUNNING,
    WAITING,
    Plot,
    level_colour,
    new_figure,
    style_axes,
)
from servetune.results import server_series as ss


def counter_rate(t: np.ndarray, counter: np.ndarray) -> np.ndarray:
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
    fig = new_figure(
        11.0, 6.0, left=0.07, right=0.99, bottom=0.09, top=0.94, wspace=0.18, hspace=0.32
    )
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
        style_axes(ax)
        ax.set_title(title, fontsize=10)
        drawn = False
        for i, lv in enumerate(levels):
            t, v = _series(lv, concept)
            if not v.size:
                continue
            if concept == ss.PREEMPTIONS_TOTAL:
                v = counter_rate(t, v)
            colour: str | tuple[float, float, float, float]
            if single:
                colour = {ss.KV_CACHE_USAGE: KV, ss.RUNNING: RUNNING, ss.WAITING: WAITING}.get(
                    concept, PREEMPT
                )
            else:
                colour = level_colour(i, n)
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
