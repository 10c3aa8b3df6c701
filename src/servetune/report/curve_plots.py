"""A sweep's curves: throughput against offered load (with the knee, the SLO-max and the
probe) and P50/P99 latency against throughput, repeats of a level merged by their median."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from servetune.report.figures import (
    E2E,
    GREY,
    KNEE,
    METRIC_COLOURS,
    METRIC_TITLES,
    TOKENS,
    TTFT,
    Plot,
    level_ticks,
    log_if_wide,
    new_figure,
    style_axes,
)
from servetune.results.sweep_schema import LevelRow, MetricName, SweepResult
from servetune.sweep import fmt
from servetune.sweep.slo import slo_items


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

    fig = new_figure(8.0, 4.2, left=0.09, right=0.89, bottom=0.13, top=0.95)
    ax = fig.add_subplot()
    style_axes(ax)
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
            label=f"SLO-max: {fmt.load(slo.offered, mode, fmt.rate_unit(sweep.config.bench))}",
        )
    ax2 = ax.twinx()
    ax2.plot(x, med("output_throughput"), "s:", color=TOKENS, alpha=0.8, label="output tok/s")
    ax2.set_ylabel("output tokens/s", color=TOKENS)
    ax2.tick_params(axis="y", colors=TOKENS)
    top = max(r.request_throughput for r in rows)
    ax.set_ylim(0, top * 1.35)  # the ideal line may leave the plot: the curve is what matters
    ax2.set_ylim(0, max(r.output_throughput for r in rows) * 1.35 or 1.0)
    log_if_wide(ax, x, "x")
    level_ticks(ax, [r.load for r in rows if r.role == "level"])
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
    fig = new_figure(11.0, 3.9, left=0.06, right=0.99, bottom=0.14, top=0.91, wspace=0.22)
    axes = fig.subplots(1, 3)
    knee = sweep.knee
    slo = dict(slo_items(sweep.config.bench.goodput))
    metrics: tuple[MetricName, ...] = ("ttft", "tpot", "e2el")
    for ax, m in zip(axes, metrics, strict=True):
        style_axes(ax)
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
        log_if_wide(ax, [p[1] for p in pts] + [p[2] for p in pts if p[2] is not None], "y", 20.0)
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
