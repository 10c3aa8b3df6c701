"""The knee of a sweep: the first metric's knee (lowest throughput, method and rationale:
``docs/knee.md``; one metric's knee: :mod:`servetune.sweep.knee_metric`), with its evidence,
the confidence it is pinned down with, the loads worth sweeping next, and the verdict.

The comfortable concurrency comes from Little's law, cross-checked with the server's mean
running requests and the client's own mean in-flight count. The confidence says how well the
levels pin the knee down.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from servetune.results.sweep_schema import (
    Confidence,
    Knee,
    KneeStatus,
    LevelRow,
    LoadMode,
    MetricKnee,
    MetricName,
)
from servetune.sweep import fmt
from servetune.sweep.knee_metric import (
    DEFAULT_K,
    METHOD,
    MIN_LEVELS,
    MIN_RISE,
    THROUGHPUT_TOL,
    MetricCurve,
    metric_knee,
)
from servetune.sweep.levels import auto_rates, round_sig
from servetune.sweep.points import METRICS, Point, points_from_rows

_RANK: dict[Confidence, int] = {"high": 2, "medium": 1, "low": 0}


def _interp(x: float, xs: Sequence[float], ys: Sequence[float | None]) -> float | None:
    pairs = [(a, b) for a, b in zip(xs, ys, strict=True) if b is not None and math.isfinite(a)]
    if not pairs:
        return None
    pairs.sort()
    return float(np.interp(x, [a for a, _ in pairs], [b for _, b in pairs]))


def _offered_at(x: float, curve: MetricCurve) -> float:
    """The load knob (offered rate or concurrency) that delivered throughput x."""
    front = [curve.points[i] for i in curve.frontier if math.isfinite(curve.points[i].load)]
    if not front:
        return x
    if x >= front[-1].throughput:
        last = front[-1]
        return last.load * x / last.throughput
    return _interp(x, [p.throughput for p in front], [p.load for p in front]) or x


def _confidence(curve: MetricCurve, x_k: float, mode: LoadMode) -> tuple[Confidence, list[str]]:
    pts = curve.points
    lo, hi = curve.bracket(x_k)
    levels: list[tuple[Confidence, str]] = []
    n_below = lo + 1
    n_above = len(pts) - hi
    if n_below < 2 or n_above < 1:
        levels.append(("low", f"only {n_below} level(s) below and {n_above} above the knee"))
    elif n_below < 3 or n_above < 2:
        levels.append(("medium", f"{n_below} level(s) below and {n_above} above the knee"))
    else:
        levels.append(("high", f"{n_below} levels below and {n_above} above the knee"))
    p_lo, p_hi = pts[lo], pts[hi]
    ratio = p_hi.load / p_lo.load if p_lo.load > 0 else math.inf
    span = f"between {p_lo.label} and {p_hi.label}"
    if not math.isfinite(ratio):
        levels.append(("low", f"bracketed {span}: the upper side is unbounded"))
    elif ratio <= 1.3:
        levels.append(("high", f"bracketed {span} ({ratio:.2f}× apart)"))
    elif ratio <= 2.05:
        levels.append(("medium", f"bracketed {span} ({ratio:.2f}× apart)"))
    else:
        levels.append(("low", f"bracketed {span} ({ratio:.1f}× apart)"))
    m = curve.metric
    # Is the rise real? Some level clearly up (≥ MIN_RISE× the knee's P99) must have a 95%
    # bootstrap interval wholly above the lower bracket level's.
    l_k = curve.latency_at(x_k) or 0.0
    risen = [
        p
        for i, p in enumerate(pts)
        if i > lo and m in p.ci and math.exp(float(curve.log_p99[i])) >= MIN_RISE * l_k
    ]
    if risen and m in p_lo.ci:
        clear = next((p for p in risen if p.ci[m][0] > p_lo.ci[m][1]), None)
        if clear is None:
            levels.append(
                (
                    "low",
                    f"no level above the knee has a P99 interval clear of {p_lo.label}'s "
                    "(95% bootstrap): the rise may be noise",
                )
            )
        else:
            levels.append(
                (
                    "high",
                    f"the P99 rise from {p_lo.label} to {clear.label} is outside their "
                    "95% bootstrap intervals",
                )
            )
    spreads = [p.spread[m] for p in (p_lo, p_hi) if m in p.spread]
    if spreads:
        worst = max(spreads)
        grade: Confidence = "high" if worst <= 0.1 else "medium" if worst <= 0.3 else "low"
        levels.append((grade, f"run-to-run spread of P99 at the bracket up to {worst:.0%}"))
    if p_lo.client_behind or p_hi.client_behind:
        levels.append(("low", "the client fell behind its schedule at a bracketing level"))
    worst_level = min(levels, key=lambda t: _RANK[t[0]])[0]
    return worst_level, [text for _, text in levels]


def _suggest(
    status: KneeStatus,
    points: Sequence[Point],
    mode: LoadMode,
    bracket: tuple[Point, Point] | None = None,
) -> list[float]:
    finite = [p for p in points if math.isfinite(p.load)]
    if not finite:
        return []
    x_max = max(p.throughput for p in points)
    top = max(p.load for p in finite)
    low = min(p.load for p in finite)
    if mode == "concurrency":
        if status == "above_range":
            return [float(top * f) for f in (2, 4, 8)]
        if status == "below_range":
            vals = {max(1, int(low * f)) for f in (0.125, 0.25, 0.5)}
            return sorted(float(v) for v in vals if v < low)
        if bracket is not None:
            a, b = bracket[0].load, bracket[1].load
            vals = {round(a + (b - a) * f) for f in (0.25, 0.5, 0.75)}
            return sorted(float(v) for v in vals if a < v < b)
        return []
    if status == "above_range":
        return [round_sig(top * f) for f in (1.5, 2.0, 3.0, 4.0)]
    if status in ("below_range", "no_clear_knee"):
        return auto_rates(x_max)
    if bracket is not None:
        a, b = bracket[0].load, bracket[1].load
        if not math.isfinite(b):
            b = max(a * 1.5, x_max * 1.2)
        return [round_sig(a * (b / a) ** (i / 4)) for i in (1, 2, 3)]
    return []


def find_knee(
    rows: Sequence[LevelRow],
    mode: LoadMode,
    k: float = DEFAULT_K,
    tol: float = THROUGHPUT_TOL,
    min_rise: float = MIN_RISE,
) -> Knee:
    """The knee of a sweep, per metric and overall, with its evidence and confidence."""
    points = points_from_rows(rows)
    method = METHOD.format(min_rise=f"{min_rise:g}")
    results = [metric_knee(points, m, k, tol, min_rise) for m in METRICS]
    per_metric = [r[0] for r in results]
    curves = {r[1].metric: r[1] for r in results}
    found = [mk for mk in per_metric if mk.status == "found" and mk.throughput is not None]
    statuses = {mk.status for mk in per_metric}
    knee = Knee(status="insufficient", method=method, k=k, per_metric=per_metric)
    if found:
        binding = min(found, key=lambda mk: mk.throughput or math.inf)
        _fill_found(knee, binding, curves, points, mode)
        return knee
    if "below_range" in statuses:
        knee.status = "below_range"
        binding = next(mk for mk in per_metric if mk.status == "below_range")
        knee.binding_metric = binding.metric
        knee.evidence = list(binding.evidence)
        first = points[0]
        name = fmt.METRIC_NAMES[binding.metric]
        knee.suggested_loads = _suggest("below_range", points, mode)
        knee.verdict = (
            f"No knee inside the sweep: the server was already saturated at the lowest level "
            f"({first.label}: {fmt.num(first.throughput)} req/s achieved, P99 {name} "
            f"{fmt.ms(first.p99.get(binding.metric))}); sweep lower "
            f"{'rates' if mode == 'rate' else 'concurrencies'}, e.g. "
            f"{fmt.loads(knee.suggested_loads)}."
        )
        return knee
    if statuses <= {"insufficient"}:
        knee.verdict = (
            f"Too few usable levels to look for a knee ({len(points)}; at least {MIN_LEVELS} "
            "with completed requests are needed)."
        )
        knee.evidence = [e for mk in per_metric for e in mk.evidence]
        return knee
    rising = all(
        c.frontier and c.frontier[-1] == len(c.points) - 1 for c in curves.values() if c.points
    )
    if "above_range" in statuses and rising:
        knee.status = "above_range"
        knee.suggested_loads = _suggest("above_range", points, mode)
        x_top = points[-1].throughput
        rises = [mk.rise for mk in per_metric if mk.rise is not None]
        knee.evidence = [e for mk in per_metric for e in mk.evidence]
        knee.verdict = (
            f"No knee inside the sweep: throughput kept rising with load up to "
            f"{fmt.num(x_top)} req/s and P99 latency grew at most {max(rises or [1.0]):.1f}×, "
            f"so the server never saturated; sweep higher "
            f"{'rates' if mode == 'rate' else 'concurrencies'}, e.g. "
            f"{fmt.loads(knee.suggested_loads)} (or --request-rates auto)."
        )
        return knee
    knee.status = "no_clear_knee"
    knee.suggested_loads = _suggest("no_clear_knee", points, mode)
    x_max = max(p.throughput for p in points)
    knee.evidence = [e for mk in per_metric for e in mk.evidence]
    knee.verdict = (
        f"No clear knee: throughput levelled off at ≈{fmt.num(x_max)} req/s but P99 latency did "
        f"not turn sharply upward; sweep finer levels around it, e.g. "
        f"{fmt.loads(knee.suggested_loads)}, with longer levels (more --num-prompts) so that a "
        "queue can build up."
    )
    return knee


def _fill_found(
    knee: Knee,
    binding: MetricKnee,
    curves: dict[MetricName, MetricCurve],
    points: Sequence[Point],
    mode: LoadMode,
) -> None:
    assert binding.throughput is not None
    curve = curves[binding.metric]
    x_k = binding.throughput
    knee.status = "found"
    knee.binding_metric = binding.metric
    knee.throughput = x_k
    front = [curve.points[i] for i in curve.frontier]
    fx = [p.throughput for p in front]
    knee.output_throughput = _interp(x_k, fx, [p.output_throughput for p in front])
    knee.offered = _offered_at(x_k, curve)
    for m, c in curves.items():
        lat = c.latency_at(x_k) if c.fit is not None else None
        if lat is not None:
            knee.latency_p99_ms[m] = lat
    mean_e2e = _interp(x_k, fx, [p.mean_e2e_ms for p in front])
    if mean_e2e is not None:
        knee.concurrency = x_k * mean_e2e / 1000.0
    knee.concurrency_server = _interp(x_k, fx, [p.server_running for p in front])
    knee.concurrency_client = _interp(x_k, fx, [p.client_concurrency for p in front])
    lo, hi = curve.bracket(x_k)
    p_lo, p_hi = curve.points[lo], curve.points[hi]
    knee.bracket = (p_lo.label, p_hi.label)
    knee.last_comfortable_level = p_lo.label
    knee.confidence, knee.confidence_reasons = _confidence(curve, x_k, mode)
    knee.evidence = list(binding.evidence)
    if knee.concurrency is not None:
        line = (
            f"Little's law: {fmt.num(x_k)} req/s × mean E2E {fmt.ms(mean_e2e)} = "
            f"{fmt.num(knee.concurrency)} requests in flight"
        )
        checks = []
        for name, other in (
            ("server mean running", knee.concurrency_server),
            ("client mean in flight", knee.concurrency_client),
        ):
            if other is not None and knee.concurrency > 0:
                checks.append(f"{name} {fmt.num(other)} ({(other / knee.concurrency - 1):+.0%})")
        if checks:
            line += "; " + ", ".join(checks)
        knee.evidence.append(line)
        if knee.concurrency_server is not None and knee.concurrency > 0:
            gap = abs(knee.concurrency_server / knee.concurrency - 1)
            if gap > 0.25:
                knee.evidence.append(
                    f"the server's running count differs from Little's law by {gap:.0%}: "
                    "requests wait outside the running batch (queue, network or client)"
                )
    others = [
        f"{fmt.METRIC_NAMES[mk.metric]} at {fmt.num(mk.throughput)} req/s"
        for mk in knee.per_metric
        if mk.status == "found" and mk.metric != binding.metric
    ]
    if others:
        knee.evidence.append("other metrics turn later: " + ", ".join(others))
    if knee.confidence != "high":
        knee.suggested_loads = _suggest("found", points, mode, (p_lo, p_hi))
    name = fmt.METRIC_NAMES[binding.metric]
    at = (
        f"≈{fmt.num(x_k)} req/s"
        if mode == "rate"
        else f"concurrency ≈{fmt.num(knee.offered)} ({fmt.num(x_k)} req/s)"
    )
    conc = f", ≈{fmt.num(knee.concurrency, 2)} requests in flight" if knee.concurrency else ""
    tok = (
        f" ({fmt.num(knee.output_throughput)} output tok/s{conc})"
        if knee.output_throughput
        else (f" ({conc[2:]})" if conc else "")
    )
    gain = max(p.throughput for p in curve.points) / x_k - 1.0
    knee.verdict = (
        f"The knee is at {at}{tok}: beyond it P99 {name} rises {binding.rise or 0:.1f}× while "
        f"throughput gains only {gain:.0%} (confidence {knee.confidence})."
    )
