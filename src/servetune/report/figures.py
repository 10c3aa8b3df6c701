"""The report's plotting kit (matplotlib, no pyplot: one Figure object each, Agg for PNG and
the SVG backend for inline SVG): :class:`Plot`, a figure with fixed margins, the axes' style,
log scales and level ticks, the empirical CDF. Colours are fixed so that a reader — and the
browser test — can tell the metrics apart: TTFT blue, TPOT orange, E2E green, the knee red.

The plots themselves: :mod:`~servetune.report.curve_plots` (a sweep's curves),
:mod:`~servetune.report.request_plots` (each request's latencies and send lag),
:mod:`~servetune.report.server_plot` (the server's metrics over time)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullFormatter

from servetune.sweep import fmt

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


def new_figure(width: float, height: float, **margins: float) -> Figure:
    # Fixed margins: constrained layout costs more than the drawing itself.
    fig = Figure(figsize=(width, height), dpi=100)
    spec = {"left": 0.08, "right": 0.97, "bottom": 0.14, "top": 0.9, "wspace": 0.3, "hspace": 0.35}
    spec.update(margins)
    fig.subplots_adjust(**spec)
    return fig


def style_axes(ax: Axes) -> None:
    ax.grid(True, which="major", alpha=0.3)
    ax.spines["top"].set_visible(False)
    ax.spines["right"].set_visible(False)


def _plain(v: float, _pos: int | None = None) -> str:
    return fmt.num(v)


def log_if_wide(ax: Axes, values: Sequence[float], axis: str, ratio: float = 8.0) -> None:
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


def level_ticks(ax: Axes, xs: Sequence[float]) -> None:
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


def ecdf(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    v = np.sort(values)
    if v.size > _CDF_POINTS:
        q = np.linspace(0, 1, _CDF_POINTS)
        return np.quantile(v, q), q
    return v, np.arange(1, v.size + 1) / v.size


def level_colour(i: int, n: int) -> str | tuple[float, float, float, float]:
    """The colour of level I of N in a per-level plot: along viridis (its ends left out, too
    light and too dark on white), or the TTFT blue when there is one level."""
    if n <= 1:
        return TTFT
    from matplotlib import colormaps

    return colormaps["viridis"](0.1 + 0.8 * i / (n - 1))  # type: ignore[no-any-return]
