"""The knee of one latency metric's throughput–latency curve (method and rationale:
``docs/knee.md``).

For a latency metric m (P99 TTFT, TPOT or E2E) against achieved throughput X:

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

The sweep's knee, from the metrics' knees, is :mod:`servetune.sweep.knee`'s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.interpolate import PchipInterpolator

from servetune.results.sweep_schema import KneeStatus, MetricKnee, MetricName
from servetune.sweep import fmt
from servetune.sweep.points import Point, pav_increasing

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
_GRID = 4001

METHOD = (
    "power: X where X^k / P99 peaks (d ln P99 / d ln X = k) on a monotone PCHIP fit of ln P99 "
    "against ln X (P99 made monotone in load); P99 must then rise ≥ {min_rise}×"
)


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
