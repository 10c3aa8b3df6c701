"""Plots of sessions and the prefix cache: TTFT against a request's turn in its session, and
against the share of its prompt the server said came from its cache."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from servetune.report.data import LevelData
from servetune.report.figures import GREY, Plot, level_colour, log_if_wide, new_figure, style_axes

DEEPEST_TURN = 16
"""Turns beyond this are drawn at it (a long session's tail would stretch the axis)."""


def _some_hit(lv: LevelData) -> bool:
    """Did any answer of the level say part of its prompt came from the cache? (A workload
    without reuse says 0 everywhere: nothing to draw.)"""
    share = lv.latencies.cached_share if lv.latencies is not None else None
    return share is not None and bool(np.any(share[np.isfinite(share)] > 0))


def cache_plot(levels: Sequence[LevelData]) -> Plot | None:
    """Two panels, one colour a level: median and P90 TTFT by turn index (when the run had
    sessions), and each request's TTFT against its cached share (when answers said it)."""
    usable = [lv for lv in levels if lv.latencies is not None]
    turns = [lv for lv in usable if lv.latencies is not None and lv.latencies.turn is not None]
    shares = [lv for lv in usable if _some_hit(lv)]
    if not turns and not shares:
        return None
    panels = int(bool(turns)) + int(bool(shares))
    fig = new_figure(5.5 * panels, 3.8, left=0.08 if panels == 2 else 0.14, bottom=0.14, top=0.9)
    axes = list(np.atleast_1d(fig.subplots(1, panels)))
    n = len(usable)
    colour = {id(lv): level_colour(i, n) for i, lv in enumerate(usable)}
    if turns:
        ax = axes.pop(0)
        style_axes(ax)
        all_vals: list[float] = []
        for lv in turns:
            lat = lv.latencies
            assert lat is not None and lat.turn is not None
            keep = np.isfinite(lat.turn) & np.isfinite(lat.ttft)
            t = np.minimum(lat.turn[keep], DEEPEST_TURN).astype(int)
            v = lat.ttft[keep]
            xs = sorted(set(t.tolist()))
            med = [float(np.median(v[t == x])) for x in xs]
            p90 = [float(np.percentile(v[t == x], 90)) for x in xs]
            c = colour[id(lv)]
            ax.plot(xs, med, "o-", color=c, lw=1.5, ms=4, label=lv.label)
            ax.plot(xs, p90, "--", color=c, lw=1, alpha=0.7)
            all_vals.extend(med + p90)
        log_if_wide(ax, all_vals, "y", 20.0)
        ax.set_xlabel(f"turn in the session (≥{DEEPEST_TURN} pooled)")
        ax.set_ylabel("TTFT (ms): median, P90 dashed")
        ax.set_title("TTFT by turn", fontsize=10)
        ax.legend(fontsize=7, loc="best")
    if shares:
        ax = axes.pop(0)
        style_axes(ax)
        all_vals = []
        for lv in shares:
            lat = lv.latencies
            assert lat is not None and lat.cached_share is not None
            keep = np.isfinite(lat.cached_share) & np.isfinite(lat.ttft)
            x, y = lat.cached_share[keep], lat.ttft[keep]
            ax.plot(x, y, ".", color=colour[id(lv)], ms=3, alpha=0.6, label=lv.label)
            all_vals.extend(float(v) for v in y)
        log_if_wide(ax, all_vals, "y", 20.0)
        ax.axvline(0.0, color=GREY, lw=0.8, ls=":")
        ax.set_xlim(-0.03, 1.03)
        ax.set_xlabel("share of the prompt served from the prefix cache")
        ax.set_ylabel("TTFT (ms)")
        ax.set_title("TTFT against cached share", fontsize=10)
        if len(shares) > 1:
            ax.legend(fontsize=7, loc="best")
    return Plot(
        "cache",
        "Sessions and the prefix cache",
        "TTFT by a request's turn in its session (a conversation grows turn by turn; the cache "
        "serves what it has seen of it) and against the share of its prompt the server said it "
        "served from its prefix cache (usage.prompt_tokens_details.cached_tokens).",
        fig,
    )
