"""The knee of the throughput–latency curve (method and rationale: ``docs/knee.md``).

For each latency metric m (P99 TTFT, TPOT, E2E) against achieved throughput X:

1. levels in offered-load order; P99s made monotone in load (pool-adjacent-violators on
   ln P99: latency does not fall when load rises, so a dip is noise);
2. the *frontier*: levels that raise throughput by more than ``tol`` over every lower level;
   levels past the last one only add latency (the *wall*), kept as one node just right of it;
3. a monotone PCHIP fit of ln P99 against ln X through the frontier nodes;
4. the knee is where X^k / P99 peaks on the fit. There the elasticity
   E = d ln P99 / d ln X equals k, i.e. the marginal latency cost dP99/dX equals k × P99/X;
   with k = 1 it is the maximum of Kleinrock's power X/P99: the point past which 1% more
   throughput costs more than 1% more latency;
5. it counts only if P99 then keeps rising at least ``min_rise``× by the top of the sweep.

The overall knee is the first metric's (lowest throughput). The comfortable concurrency comes
from Little's law, cross-checked with the server's mean running requests and the client's own
mean in-flight count. The confidence says how well the levels pin the knee down.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.interpolate import PchipInterpolator

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
from servetune.sweep.levels import auto_rates, round_sig

DEFAULT_K = 2.0
THROUGHPUT_TOL = 0.03
"""A level whose throughput is within 3% of the best lower level adds no throughput."""
MIN_RISE = 1.5
"""P99 must grow at least 1.5× beyond the knee (else the crossing is noise or a gentle slope)."""
MIN_LEVELS = 3
FLAT_BELOW = 0.75
"""Below a knee the curve must be flatter: secant elasticity from the lowest level to the knee
≤ FLAT_BELOW × k. A latency that grows about as fast as throughput all along (a closed loop's
start-up burst in P99 TTFT, say) has no comfortable part to leave, hence no knee."""
METRICS: tuple[MetricName, ...] = ("ttft", "tpot", "e2el")
_GRID = 4001
_RANK: dict[Confidence, int] = {"high": 2, "medium": 1, "low": 0}

METHOD = (
    "power: X where X^k / P99 peaks (d ln P99 / d ln X = k) on a monotone PCHIP fit of ln P99 "
    "against ln X (P99 made monotone in load); P99 must then rise ≥ {min_rise}×"
)


@dataclass(frozen=True)
class Point:
    """One load level as the knee sees it (several runs at one load are merged)."""

    label: str
    load: float
    throughput: float
    output_throughput: float = 0.0
    p99: dict[str, float] = field(default_factory=dict)
    ci: dict[str, tuple[float, float]] = field(default_factory=dict)
    spread: dict[str, float] = field(default_factory=dict)
    """Run-to-run relative spread ((max − min) / median of P99) when the load was run twice+."""
    mean_e2e_ms: float | None = None
    server_running: float | None = None
    client_concurrency: float | None = None
    client_behind: bool = False


def _median(values: Sequence[float]) -> float:
    return float(np.median(np.asarray(values, dtype=float)))


def _mean_opt(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return float(np.mean(vals)) if vals else None


def points_from_rows(rows: Sequence[LevelRow]) -> list[Point]:
    """Usable points in load order; rows at the same load are merged (median P99s)."""
    groups: dict[float, list[LevelRow]] = {}
    for r in rows:
        if r.completed > 0 and r.request_throughput > 0:
            groups.setdefault(r.load, []).append(r)
    out: list[Point] = []
    for load in sorted(groups):
        g = groups[load]
        p99: dict[str, float] = {}
        ci: dict[str, tuple[float, float]] = {}
        spread: dict[str, float] = {}
        for m in METRICS:
            vals = [v for r in g if (v := r.p99(m)) is not None and v > 0]
            if not vals:
                continue
            p99[m] = _median(vals)
            if len(vals) >= 2:
                spread[m] = (max(vals) - min(vals)) / p99[m]
            cis = [r.p99_ci[m] for r in g if m in r.p99_ci]
            if cis:
                ci[m] = (min(c[0] for c in cis), max(c[1] for c in cis))
        out.append(
            Point(
                label=g[0].label,
                load=load,
                throughput=float(np.mean([r.request_throughput for r in g])),
                output_throughput=float(np.mean([r.output_throughput for r in g])),
                p99=p99,
                ci=ci,
                spread=spread,
                mean_e2e_ms=_mean_opt([r.e2el_mean for r in g]),
                server_running=_mean_opt([r.server.running_mean if r.server else None for r in g]),
                client_concurrency=_mean_opt([r.client_mean_concurrency for r in g]),
                client_behind=any(r.client_behind for r in g),
            )
        )
    return out


def pav_increasing(y: Sequence[float]) -> np.ndarray:
    """Least-squares non-decreasing fit (pool adjacent violators, equal weights)."""
    sums: list[float] = []
    counts: list[int] = []
    for v in y:
        sums.append(float(v))
        counts.append(1)
        while len(sums) > 1 and sums[-2] / counts[-2] > sums[-1] / counts[-1]:
            s, c = sums.pop(), counts.pop()
            sums[-1] += s
            counts[-1] += c
    out: list[float] = []
    for s, c in zip(sums, counts, strict=True):
        out.extend([s / c] * c)
    return np.array(out)


@dataclass
class MetricCurve:
    """The monotone fit of one metric's P99 against throughput."""

    metric: MetricName
    points: list[Point]
    log_p99: np.ndarray
    """Monotone (in load order) ln P99 of each point."""
    frontier: list[int]
    """Indices of the points that raised throughput."""
    wall: bool
    nodes_u: np.ndarray
    """ln X of the fit nodes (frontier, then the wall node when there is one)."""
    nodes_v: np.ndarray
    fit: PchipInterpolator | None

    @classmethod
    def build(cls, points: Sequence[Point], metric: MetricName, tol: float) -> MetricCurve:
        pts = [p for p in points if metric in p.p99]
        y = pav_increasing([math.log(p.p99[metric]) for p in pts]) if pts else np.zeros(0)
        frontier: list[int] = []
        for i, p in enumerate(pts):
            if not frontier or p.throughput > pts[frontier[-1]].throughput * (1 + tol):
                frontier.append(i)
        u = [math.log(pts[i].throughput) for i in frontier]
        v = [float(y[i]) for i in frontier]
        wall = False
        if frontier and frontier[-1] < len(pts) - 1:
            top = float(y[-1])
            if top > v[-1] + 1e-12:
                u.append(u[-1] + math.log1p(tol))
                v.append(top)
                wall = True
        fit = PchipInterpolator(np.array(u), np.array(v)) if len(u) >= 2 else None
        return cls(metric, pts, y, frontier, wall, np.array(u), np.array(v), fit)

    def latency_at(self, x: float) -> float | None:
        """The fitted P99 (ms) at throughput x, clamped to the fitted range."""
        if self.fit is None or x <= 0:
            return None
        u = min(max(math.log(x), float(self.nodes_u[0])), float(self.nodes_u[-1]))
        return float(math.exp(float(self.fit(u))))

    def elasticity(self, u: np.ndarray) -> np.ndarray:
        assert self.fit is not None
        out: np.ndarray = self.fit.derivative()(u)
        return out

    def bracket(self, x: float) -> tuple[int, int]:
        """Indices (into points, load order) of the measured levels around throughput x."""
        lo = self.frontier[0]
        for i in self.frontier:
            if self.points[i].throughput <= x * (1 + 1e-9):
                lo = i
        hi = min(lo + 1, len(self.points) - 1)
        return lo, hi


def _crossing(curve: MetricCurve, k: float, min_rise: float) -> tuple[float, int] | None:
    """(ln X, grid index) where X^k / P99 peaks on the fit, if P99 then rises ``min_rise``×.

    At the peak d ln P99 / d ln X = k (the elasticity crosses k upward); taking the global
    peak rather than the first crossing keeps a bump in a gently rising curve (or a noise
    blip) from passing for the knee when the curve goes on to pay off more throughput.
    """
    assert curve.fit is not None
    grid = np.linspace(float(curve.nodes_u[0]), float(curve.nodes_u[-1]), _GRID)
    v = np.maximum.accumulate(curve.fit(grid))
    i = int(np.argmax(k * grid - v))
    if float(curve.log_p99.max()) - float(v[i]) < math.log(min_rise) - 1e-12:
        return None
    return float(grid[i]), i


def metric_knee(
    points: Sequence[Point],
    metric: MetricName,
    k: float = DEFAULT_K,
    tol: float = THROUGHPUT_TOL,
    min_rise: float = MIN_RISE,
) -> tuple[MetricKnee, MetricCurve]:
    curve = MetricCurve.build(points, metric, tol)
    name = fmt.METRIC_NAMES[metric]
    pts = curve.points
    if len(pts) < MIN_LEVELS:
        mk = MetricKnee(
            metric=metric,
            status="insufficient",
            evidence=[f"{len(pts)} level(s) with a P99 {name}; at least {MIN_LEVELS} are needed"],
        )
        return mk, curve
    lat = np.exp(curve.log_p99)
    rise_total = float(lat.max() / lat.min())
    x_max = max(p.throughput for p in pts)
    if curve.fit is None:
        # Every level delivered the same throughput. With the load at least doubled across
        # them that is saturation by itself (a fixed-size run cannot grow its queue, and so
        # its latency, without bound); otherwise only a latency rise says so.
        first = pts[0]
        span = pts[-1].load / first.load if first.load > 0 else math.inf
        behind = any(p.client_behind for p in pts)
        if rise_total >= min_rise or (span >= 2.0 and not behind):
            mk = MetricKnee(
                metric=metric,
                status="below_range",
                throughput=first.throughput,
                latency_ms=float(lat[0]),
                rise=rise_total,
                evidence=[
                    f"every level delivered ≈{fmt.num(x_max)} req/s while the load rose "
                    f"{'' if math.isinf(span) else f'{span:.3g}× '}and P99 {name} "
                    f"{rise_total:.2f}× ({fmt.ms(float(lat[0]))} → {fmt.ms(float(lat.max()))}): "
                    f"saturated from the lowest level ({first.label})"
                ],
            )
        else:
            mk = MetricKnee(
                metric=metric,
                status="no_clear_knee",
                evidence=[
                    f"every level delivered ≈{fmt.num(x_max)} req/s and P99 {name} changed "
                    f"only {rise_total:.2f}×"
                ],
            )
        return mk, curve

    hit = _crossing(curve, k, min_rise)
    if hit is None:
        still_rising = curve.frontier[-1] == len(pts) - 1
        status: KneeStatus = "above_range" if still_rising else "no_clear_knee"
        ev = [
            f"elasticity of P99 {name} stays below k = {k:g} (or the P99 rises < "
            f"{min_rise:g}× after it); P99 grows {rise_total:.2f}× over the sweep",
        ]
        if still_rising:
            ev.append(
                f"throughput still rising at the highest level ({pts[-1].label}: "
                f"{fmt.num(pts[-1].throughput)} req/s)"
            )
        else:
            top = pts[curve.frontier[-1]]
            ev.append(
                f"throughput stopped rising at ≈{fmt.num(top.throughput)} req/s ({top.label}) "
                f"without a sharp P99 rise"
            )
        return MetricKnee(metric=metric, status=status, rise=rise_total, evidence=ev), curve

    u_k, idx = hit
    x_k = math.exp(u_k)
    l_k = math.exp(float(curve.fit(u_k))) if curve.fit is not None else float(lat[0])
    rise = float(lat.max()) / l_k
    lo, hi = curve.bracket(x_k)
    u_0 = float(curve.nodes_u[0])
    if idx > 0 and u_k > u_0:
        below = (math.log(l_k) - float(curve.nodes_v[0])) / (u_k - u_0)
        if below > FLAT_BELOW * k:
            n_below = sum(1 for i in curve.frontier if pts[i].throughput < x_k)
            ev = [
                f"P99 {name} grows about as fast as throughput from the lowest level on "
                f"(elasticity {below:.2f} up to {fmt.num(x_k)} req/s): no flat part to leave",
            ]
            if n_below <= 1:
                ev.append(f"the lowest level ({pts[0].label}) is already at or near its knee")
                return (
                    MetricKnee(metric=metric, status="below_range", rise=rise_total, evidence=ev),
                    curve,
                )
            return (
                MetricKnee(metric=metric, status="no_clear_knee", rise=rise_total, evidence=ev),
                curve,
            )
    gain = x_max / x_k - 1.0
    top_i = int(np.argmax(curve.log_p99))
    evidence = [
        f"X{'' if k == 1 else f'^{k:g}'} / P99 {name} peaks at {fmt.num(x_k)} req/s "
        f"(P99 {name} {fmt.ms(l_k)}): past it d ln P99 / d ln X exceeds k = {k:g}",
        f"beyond it P99 {name} rises {rise:.1f}× to {fmt.ms(float(lat.max()))} "
        f"({pts[top_i].label}) while throughput gains {gain:.0%} (max {fmt.num(x_max)} req/s)",
    ]
    if curve.wall:
        last = pts[curve.frontier[-1]]
        evidence.append(
            f"levels above {last.label} add < {THROUGHPUT_TOL:.0%} throughput: saturated at "
            f"≈{fmt.num(x_max)} req/s"
        )
    status = "below_range" if idx == 0 else "found"
    if status == "below_range":
        evidence.insert(0, f"the elasticity already exceeds k at the lowest level ({pts[0].label})")
    mk = MetricKnee(
        metric=metric,
        status=status,
        throughput=x_k,
        latency_ms=l_k,
        rise=rise,
        bracket=(pts[lo].label, pts[hi].label),
        evidence=evidence,
    )
    return mk, curve


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
