"""A configuration's capacity: its saturated throughput and its SLO-max rate per replica.

- *saturation*: every request at once (vLLM's offline batch): the most the replica serves,
  the highest TPOT, the lowest cost per token;
- *SLO-max rate*: the highest offered rate (req/s, Poisson) at which the P99 of every latency
  in the SLO stays within it *and the replica keeps up*: past the ramp-up, the requests in
  flight must not grow by 15% of the offered rate or more (diagnose's ``overloaded`` rule,
  :data:`~servetune.diagnose.rules.LATE_GROWTH`) — a finite run just under saturation can
  still show good percentiles while its queue grows without bound. Searched downwards from
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
"""

from __future__ import annotations

import math

from pydantic import BaseModel

from servetune.diagnose.rules import LATE_GROWTH
from servetune.plan.simulate import Point, simulate
from servetune.plan.workload import Workload
from servetune.results.schema import Slo
from servetune.sim.config import ResolvedConfig
from servetune.sim.memory import MemoryPlan

REL_TOL = 0.08
LADDER = (0.88, 0.7, 0.5, 0.3, 0.15, 0.05)
"""Shares of the saturated throughput tried, top down."""
MIN_SPAN_S = 40.0
"""Every rate is simulated over at least this many seconds of arrivals (more requests at
higher rates): a queue that builds slowly near saturation shows within it."""
METRICS = ("ttft", "tpot", "e2el")
_NAMES = {"ttft": "TTFT", "tpot": "TPOT", "e2el": "E2E"}
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


def margin(p: Point, slo: Slo) -> float:
    """How far the point is from its limits: ≤ 1 passes (max of P99 ÷ SLO, growth ÷ 15%)."""
    if p.failed or p.completed == 0:
        return math.inf
    worst = 0.0
    for m in METRICS:
        limit = getattr(slo, m)
        if limit is None:
            continue
        got = p.p99(m)
        worst = max(worst, math.inf if got is None else got / limit)
    growth = p.inflight_growth_late_share
    if growth is not None:
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
        return simulate(r, mem, w, rate, max(n, math.ceil(rate * MIN_SPAN_S)))

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
