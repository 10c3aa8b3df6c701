"""The SLO form of the knee: the highest load whose P99s meet every SLO given.

P99s are made monotone in load (as for the knee), then the crossing of each SLO between the last
level that meets them all and the first that does not is interpolated on a monotone PCHIP fit
of ln P99 against ln load; the lowest crossing wins and names the limiting metric. One more
level at that load (``--confirm``) checks the interpolation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy.interpolate import PchipInterpolator
from scipy.optimize import brentq

from servetune.results.schema import Slo
from servetune.results.sweep_schema import LevelRow, LoadMode, MetricName, SloMax
from servetune.sweep import fmt
from servetune.sweep.levels import round_sig
from servetune.sweep.points import Point, pav_increasing, points_from_rows


def slo_items(slo: Slo) -> list[tuple[MetricName, float]]:
    items: list[tuple[MetricName, float]] = []
    if slo.ttft is not None:
        items.append(("ttft", slo.ttft))
    if slo.tpot is not None:
        items.append(("tpot", slo.tpot))
    if slo.e2el is not None:
        items.append(("e2el", slo.e2el))
    return items


def describe_slo(slo: Slo) -> str:
    return ", ".join(f"P99 {fmt.METRIC_NAMES[m]} ≤ {fmt.ms(v)}" for m, v in slo_items(slo))


def row_meets(row: LevelRow, slo: Slo) -> bool:
    """Whether one measured level's P99s meet every SLO (a missing P99 does not)."""
    for m, limit in slo_items(slo):
        v = row.p99(m)
        if v is None or v > limit:
            return False
    return True


def _level_text(p: Point, items: Sequence[tuple[MetricName, float]]) -> str:
    parts = []
    for m, limit in items:
        v = p.p99.get(m)
        mark = "meets" if v is not None and v <= limit else "misses"
        parts.append(f"P99 {fmt.METRIC_NAMES[m]} {fmt.ms(v)} ({mark} {fmt.ms(limit)})")
    return f"{p.label}: " + ", ".join(parts)


def find_slo_max(
    rows: Sequence[LevelRow], slo: Slo, mode: LoadMode, rate_unit: str = "req/s"
) -> SloMax | None:
    """The SLO-max load of a sweep; None when no SLO was given. ``rate_unit``: what an
    offered rate counts (:func:`servetune.sweep.fmt.rate_unit`)."""
    items = slo_items(slo)
    if not items:
        return None
    unit = "rates" if mode == "rate" else "concurrencies"
    points = [p for p in points_from_rows(rows) if all(m in p.p99 for m, _ in items)]
    if not points:
        return SloMax(
            slo=slo,
            status="insufficient",
            verdict="No level has the P99s the SLOs need (no completed requests).",
        )
    mono = {m: pav_increasing([math.log(p.p99[m]) for p in points]) for m, _ in items}
    meets = [all(mono[m][i] <= math.log(lim) for m, lim in items) for i in range(len(points))]
    what = describe_slo(slo)
    if all(meets):
        top = points[-1]
        suggest = (
            [round_sig(top.load * f) for f in (1.5, 2, 3, 4)] if math.isfinite(top.load) else []
        )
        return SloMax(
            slo=slo,
            status="all_meet",
            offered=top.load,
            throughput=top.throughput,
            evidence=[_level_text(top, items)],
            suggested_loads=suggest,
            verdict=(
                f"Every level meets the SLOs ({what}), up to "
                f"{fmt.load(top.load, mode, rate_unit)}: the SLO-max is higher than the sweep "
                "reached"
                + (f"; sweep higher {unit}, e.g. {fmt.loads(suggest)}." if suggest else ".")
            ),
        )
    if not meets[0]:
        first = points[0]
        low = first.load if math.isfinite(first.load) else first.throughput
        suggest = [round_sig(low * f) for f in (0.1, 0.25, 0.5, 0.75)]
        if mode == "concurrency":
            suggest = sorted({float(max(1, int(v))) for v in suggest if v >= 1} - {low})
        return SloMax(
            slo=slo,
            status="none_meet",
            evidence=[_level_text(first, items)],
            suggested_loads=suggest,
            verdict=(
                f"No level meets the SLOs ({what}), not even the lowest "
                f"({fmt.load(first.load, mode, rate_unit)}); sweep lower {unit}"
                + (f", e.g. {fmt.loads(suggest)}." if suggest else ".")
            ),
        )
    j = max(i for i, ok in enumerate(meets) if ok)
    a, b = points[j], points[j + 1]
    evidence = [_level_text(a, items), _level_text(b, items)]
    limiting: MetricName | None = None
    if not math.isfinite(b.load):
        offered, interpolated = a.load, False
    else:
        finite = [p for p in points if math.isfinite(p.load)]
        u = np.log([p.load for p in finite])
        crossings: dict[MetricName, float] = {}
        for m, lim in items:
            y = mono[m][: len(finite)]
            if y[j + 1] <= math.log(lim):
                continue
            fit = PchipInterpolator(u, y) if len(u) >= 2 else None
            ua, ub, target = float(u[j]), float(u[j + 1]), math.log(lim)
            if fit is None:
                continue
            root = brentq(lambda t, f=fit, c=target: float(f(t)) - c, ua, ub)
            crossings[m] = math.exp(float(root))
        if crossings:
            limiting, offered = min(crossings.items(), key=lambda kv: kv[1])
        else:
            offered = a.load
        interpolated = limiting is not None
    if mode == "concurrency":
        offered = float(math.floor(offered + 1e-9))
    finite_pts = [p for p in points if math.isfinite(p.load)]
    throughput = float(
        np.interp(offered, [p.load for p in finite_pts], [p.throughput for p in finite_pts])
    )
    how = (
        f"interpolated between {a.label} and {b.label}"
        if interpolated
        else f"the highest level that meets them ({a.label})"
    )
    limit_text = f"; limited by P99 {fmt.METRIC_NAMES[limiting]}" if limiting else ""
    return SloMax(
        slo=slo,
        status="found",
        offered=offered,
        throughput=throughput,
        limiting_metric=limiting,
        bracket=(a.label, b.label),
        interpolated=interpolated,
        evidence=evidence,
        verdict=(
            f"Highest load meeting the SLOs ({what}): {fmt.load(offered, mode, rate_unit)} "
            f"(≈{fmt.num(throughput)} req/s achieved), {how}{limit_text}."
        ),
    )


def apply_confirmation(
    result: SloMax, confirm_row: LevelRow, slo: Slo, mode: LoadMode, rate_unit: str = "req/s"
) -> None:
    """Record what one more level at the SLO-max load showed."""
    result.confirm_label = confirm_row.label
    ok = row_meets(confirm_row, slo)
    result.confirmed = ok
    parts = [f"P99 {fmt.METRIC_NAMES[m]} {fmt.ms(confirm_row.p99(m))}" for m, _ in slo_items(slo)]
    load = confirm_row.load
    if ok:
        result.evidence.append(
            f"confirmed: one more level at {fmt.load(load, mode, rate_unit)} meets them "
            f"({', '.join(parts)})"
        )
        result.verdict = result.verdict.rstrip(".") + "; confirmed by one more level."
    else:
        result.evidence.append(
            f"not confirmed: one more level at {fmt.load(load, mode, rate_unit)} misses them "
            f"({', '.join(parts)})"
        )
        result.verdict = (
            result.verdict.rstrip(".")
            + f"; a confirming level at {fmt.load(load, mode, rate_unit)} missed them."
        )
