"""A configuration's capacity: its saturated throughput and its SLO-max rate per replica.

- *saturation*: every request at once (vLLM's offline batch): the most the replica serves,
  the highest TPOT, the lowest cost per token;
- *SLO-max rate*: the highest offered rate (req/s, Poisson) at which the P99 of every latency
  in the SLO stays within it *and the replica keeps up*: past the ramp-up, the requests in
  flight must not grow by 15% of the offered rate or more (:data:`LATE_GROWTH`) — a finite
  run just under saturation can still show good percentiles while its queue grows without
  bound. Searched downwards from
  0.88× the saturated throughput (the :data:`LADDER`; a replica is never planned closer to
  saturation than that) to the first rate that passes; then between it and the rate above,
  each next rate interpolated where the *margin* (the largest P99 ÷ SLO, or growth ÷ 15%)
  crosses 1, on log scales, kept inside the middle 60% of the bracket so that it shrinks at
  every step, until the two rates are within ``REL_TOL``. The figure is exact to that
  tolerance, on the safe side: the rate reported was simulated and passed.

Every rate is simulated with ``n`` requests, at least :data:`MIN_SPAN_S` seconds of arrivals:
the P99 of a Poisson run grows with its length (rarer bursts), so ``n`` is part of the SLO's
meaning — 1,000 by default, ``vllm bench serve``'s default number of prompts.

A configuration that misses the SLO even at 5% of its saturated throughput cannot meet it at
any rate (its unloaded latency is too high), which is said with the figure that misses.

The search runs on one draw of the traffic, and it picks the highest rate that passed *on
that draw*: near capacity the P99 of 1,000 Poisson requests swings by tens of % from draw to
draw (A100, Qwen2.5-7B, 1024/128, P99 TPOT ≤ 100 ms: the search's 9.03 req/s missed on 3 of
12 other draws, P99 TPOT 57–120 ms), so the figure is optimistic. :func:`confirm` checks it
on :data:`DRAWS` independent draws (:meth:`~servetune.plan.workload.Workload.redrawn`: other
arrivals, the requests in another order, the same request count) and steps the rate down
until the SLO holds on every one of them: that is what a confirmed SLO-max rate means — an
observation on :data:`DRAWS` draws, not a bound: fresh draws still miss at such a rate now and
then (:data:`FRESH_MISSED`). It starts at the search's figure and only steps down, so it only
ever lowers a figure.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from pydantic import BaseModel, Field

from servetune.arch.memory import MemoryPlan
from servetune.plan.simulate import Point, simulate
from servetune.plan.workload import Workload
from servetune.results.schema import Slo
from servetune.sim.resolved import ResolvedConfig

REL_TOL = 0.08
LATE_GROWTH = 0.15
"""The planner's test that a simulated replica keeps up: past the ramp-up, requests in flight
grow at ≥ 15% of the offered rate (≤ 8% in every stable simulated run, ≥ 22% in every
overloaded one; a confirmation pools its draws, :func:`pooled_growth`). Diagnose's and watch's
``overloaded`` rule asks a growth told from the arrivals' noise instead
(:mod:`servetune.diagnose.growth`): over a live window a quarter's slope is mostly noise,
while the planner's points are whole simulated runs of ≥ 40 s of arrivals."""
LADDER = (0.88, 0.7, 0.5, 0.3, 0.15, 0.05)
"""Shares of the saturated throughput tried, top down."""
MIN_SPAN_S = 40.0
"""Every rate is simulated over at least this many seconds of arrivals (more requests at
higher rates): a queue that builds slowly near saturation shows within it."""
METRICS = ("ttft", "tpot", "e2el")
_NAMES = {"ttft": "TTFT", "tpot": "TPOT", "e2el": "E2E"}
DRAWS = 8
"""Independent draws of the traffic a capacity is confirmed on: the SLO must hold on all."""
FRESH_MISSED, FRESH_DRAWS, FRESH_SCENARIOS = 30, 740, 4
"""What "held on all :data:`DRAWS` draws" meant, measured (``benchmarks/plan_fresh_draws.py``,
docs/plan.md): of ``FRESH_DRAWS`` fresh draws of the traffic (other than the search's and the
confirmation's) at the confirmed rates of the rows plans showed, over ``FRESH_SCENARIOS``
scenarios, ``FRESH_MISSED`` missed a P99 (1–7% per scenario, up to 4 of 20 for one row) — a
miss rate observed, not a bound."""
MAX_STEPS = 6
"""Rates tried at most when confirming (each one :data:`DRAWS` simulations)."""
OVERLOAD = "overload"
CAPACITY = "capacity"
"""The limit when the SLO holds up to the ladder's top (0.88× saturation)."""


class Capacity(BaseModel):
    saturation: Point
    slo_max_rate: float | None = None
    """Per replica, req/s; None when the SLO is missed at any rate."""
    at_slo: Point | None = None
    """The simulated point at ``slo_max_rate``."""
    above_slo: Point | None = None
    """The lowest simulated rate that missed the SLO (the bracket's upper end)."""
    limiting_metric: str | None = None
    reason: str | None = None
    evaluations: int = 0


def latency_margin(p: Point, slo: Slo) -> float:
    """The largest P99 ÷ SLO (inf: a request failed): ≤ 1 meets the latency SLOs."""
    if p.failed or p.completed == 0:
        return math.inf
    worst = 0.0
    for m in METRICS:
        limit = getattr(slo, m)
        if limit is None:
            continue
        got = p.p99(m)
        worst = max(worst, math.inf if got is None else got / limit)
    return worst


def margin(p: Point, slo: Slo) -> float:
    """How far the point is from its limits: ≤ 1 passes (max of P99 ÷ SLO, growth ÷ 15%)."""
    worst = latency_margin(p, slo)
    growth = p.inflight_growth_late_share
    if growth is not None and math.isfinite(worst):
        worst = max(worst, growth / LATE_GROWTH)
    return worst


def _next_rate(lo: Point, m_lo: float, hi: Point, m_hi: float) -> float:
    """Where log(margin) crosses 0 between the bracket's ends (log rate), kept in its middle."""
    a, b = math.log(lo.rate), math.log(hi.rate)
    la, lb = math.log(max(m_lo, 1e-6)), math.log(min(max(m_hi, 1e-6), 1e6))
    x = a + (0.0 - la) * (b - a) / (lb - la) if lb > la else (a + b) / 2
    x = min(max(x, a + 0.2 * (b - a)), a + 0.8 * (b - a))
    return math.exp(x)


def misses(p: Point, slo: Slo) -> list[str]:
    """The SLO metrics whose P99 the point misses (a failed request misses them all)."""
    if p.failed or p.completed == 0:
        return list(METRICS)
    out = []
    for m in METRICS:
        limit = getattr(slo, m)
        got = p.p99(m)
        if limit is not None and (got is None or got > limit):
            out.append(m)
    growth = p.inflight_growth_late_share
    if growth is not None and growth >= LATE_GROWTH:
        out.append(OVERLOAD)
    return out


def describe_miss(p: Point, slo: Slo, metric: str) -> str:
    if metric == OVERLOAD:
        return (
            f"requests pile up: in flight grew at {p.inflight_growth_late_share or 0:.0%} of the "
            f"offered rate (rule: < {LATE_GROWTH:.0%})"
        )
    got = p.p99(metric)
    return (
        f"P99 {_NAMES[metric]} {got:,.0f} ms > SLO {getattr(slo, metric):,.0f} ms"
        if got is not None
        else f"no {_NAMES[metric]} measured"
    )


def requests_at(rate: float, n: int) -> int:
    """Requests simulated at ``rate``: ``n``, or more to span :data:`MIN_SPAN_S` of arrivals."""
    return max(n, math.ceil(rate * MIN_SPAN_S))


def simulate_draw(
    r: ResolvedConfig, mem: MemoryPlan, w: Workload, rate: float, n: int, draw: int = 0
) -> Point:
    """One point of the search (draw 0) or of a confirmation (draws ≥ 1)."""
    return simulate(r, mem, w.redrawn(draw), rate, requests_at(rate, n))


def find_capacity(r: ResolvedConfig, mem: MemoryPlan, w: Workload, slo: Slo, n: int) -> Capacity:
    sat = simulate(r, mem, w, float("inf"), n)
    evals = 1
    if sat.completed == 0:
        return Capacity(
            saturation=sat,
            evaluations=evals,
            reason=f"every request failed ({sat.failed} of {sat.requests}): requests longer than "
            f"--max-model-len {r.max_model_len}",
        )
    top = sat.request_throughput
    above: Point | None = None
    feasible: Point | None = None

    def at(rate: float) -> Point:
        return simulate_draw(r, mem, w, rate, n)

    m_above = m_feasible = math.inf
    for share in LADDER:
        p = at(top * share)
        evals += 1
        m = margin(p, slo)
        if m <= 1.0:
            feasible, m_feasible = p, m
            break
        above, m_above = p, m
    if feasible is None:
        assert above is not None
        worst = misses(above, slo)
        return Capacity(
            saturation=sat,
            above_slo=above,
            limiting_metric=worst[0],
            evaluations=evals,
            reason=f"misses the SLO at any rate: even at {above.rate:.3g} req/s "
            + "; ".join(describe_miss(above, slo, m) for m in worst),
        )
    while above is not None and above.rate / feasible.rate > 1 + REL_TOL:
        p = at(_next_rate(feasible, m_feasible, above, m_above))
        evals += 1
        m = margin(p, slo)
        if m > 1.0:
            above, m_above = p, m
        else:
            feasible, m_feasible = p, m
    # passing at the ladder's top: capped there, the SLO does not bind before saturation
    limiting = misses(above, slo)[0] if above is not None else CAPACITY
    return Capacity(
        saturation=sat,
        slo_max_rate=feasible.rate,
        at_slo=feasible,
        above_slo=above,
        limiting_metric=limiting,
        evaluations=evals,
    )


class Confirmation(BaseModel):
    """A searched SLO-max rate checked on independent draws of the traffic."""

    searched_rate: float
    """The search's figure (one draw)."""
    rate: float | None = None
    """The highest rate tried at which the SLO held on every draw; None: none did."""
    draws: list[Point] = Field(default_factory=list)
    """The draws at ``rate`` (all passed)."""
    missed: list[Point] = Field(default_factory=list)
    """The draws at the lowest rate tried that missed (empty when the searched rate held)."""
    evaluations: int = 0

    @property
    def missed_rate(self) -> float | None:
        return self.missed[0].rate if self.missed else None


def worst(points: list[Point], slo: Slo) -> Point:
    """The draw furthest from its latency limits."""
    return max(points, key=lambda p: latency_margin(p, slo))


def pooled_growth(points: list[Point]) -> float | None:
    """The draws' mean in-flight growth (÷ the rate): whether the replica keeps up is a
    property of the rate, and one draw's slope is noisy (A100, 200 requests at 60% of
    saturation: one draw in 30 reads ≥ 15%; the mean of 8 has a third of the spread)."""
    got = [g for p in points if (g := p.inflight_growth_late_share) is not None]
    return sum(got) / len(got) if got else None


def draws_margin(points: list[Point], slo: Slo) -> float:
    """≤ 1 when every draw meets the latency SLOs and the draws' mean growth is < 15%."""
    m = max(latency_margin(p, slo) for p in points)
    growth = pooled_growth(points)
    if growth is not None and math.isfinite(m):
        m = max(m, growth / LATE_GROWTH)
    return m


def draws_misses(points: list[Point], slo: Slo) -> tuple[int, list[str]]:
    """How many draws miss a latency SLO, and what is missed: the worst draw's metrics, and
    ``overload`` when the draws' mean growth is ≥ 15%."""
    bad = [p for p in points if latency_margin(p, slo) > 1.0]
    what = [m for m in misses(worst(points, slo), slo) if m != OVERLOAD] if bad else []
    growth = pooled_growth(points)
    if growth is not None and growth >= LATE_GROWTH:
        what.append(OVERLOAD)
    return len(bad), what


def describe_draws_miss(points: list[Point], slo: Slo) -> str:
    n_bad, what = draws_misses(points, slo)
    w = worst(points, slo)
    parts = [
        f"requests pile up: in flight grew at {pooled_growth(points) or 0:.0%} of the offered "
        f"rate on average over the draws (rule: < {LATE_GROWTH:.0%})"
        if m == OVERLOAD
        else describe_miss(w, slo, m)
        for m in what
    ]
    return f"{n_bad} of {len(points)} draws missed at {points[0].rate:.3g} req/s (" + (
        "; ".join(parts) + ")"
    )


def step_down(rate: float, worst_margin: float) -> float:
    """The next rate below one where some draw missed: the search's tolerance lower (the
    figure keeps its ``REL_TOL`` resolution), more when a draw missed by much — near capacity
    a draw's P99 grows as the rate to the power 3–4 (A100, Qwen2.5-7B: rate −6%, P99 TPOT
    −19 to −23%), so ÷ margin^¼ — at most halved."""
    factor = min(1 / (1 + REL_TOL), worst_margin**-0.25 if math.isfinite(worst_margin) else 0.5)
    return rate * max(0.5, factor)


def confirm(
    searched_rate: float,
    slo: Slo,
    run_draws: Callable[[float], list[Point]],
    max_steps: int = MAX_STEPS,
) -> Confirmation:
    """Check ``searched_rate`` on the draws ``run_draws(rate)`` simulates; while some draw
    misses a latency SLO, or their mean in-flight growth says the replica does not keep up
    (:func:`draws_margin`), step down (:func:`step_down`) and try again. The confirmed rate is
    the first, from the top, at which every draw held."""
    rate = searched_rate
    out = Confirmation(searched_rate=searched_rate)
    for _ in range(max_steps):
        points = run_draws(rate)
        out.evaluations += len(points)
        m = draws_margin(points, slo)
        if m <= 1.0:
            out.rate, out.draws = rate, points
            return out
        out.missed = points
        rate = step_down(rate, m)
    return out


def spread(points: Sequence[object], slo: Slo) -> str:
    """The lowest–highest P99 over the draws of each metric in the SLO (points: ``Point`` or
    ``PlannedPoint``, anything with ``<metric>_p99_ms``)."""
    parts = []
    for m in METRICS:
        if getattr(slo, m) is None:
            continue
        got = [v for p in points if (v := getattr(p, f"{m}_p99_ms")) is not None]
        if got:
            parts.append(f"P99 {_NAMES[m]} {min(got):,.0f}–{max(got):,.0f} ms")
    return ", ".join(parts)
