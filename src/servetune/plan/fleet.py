"""Replicas behind a router (``servetune plan --router POLICY``): the fewest replicas of a
candidate that hold the peak at the SLOs, the whole fleet simulated.

Planned one replica at a time, a fleet is the peak ÷ one replica's SLO-max rate — which
holds where every replica sees the same traffic. Behind a router on traffic that reuses its
prompts (sessions whose turns resend the conversation, agents resending a system prompt), it
does not: what each replica's prefix cache holds, and so every prefill, depends on where the
router sends each request and on how many replicas share the traffic — spread round-robin
over N replicas, each must hold every live conversation and evicts more as N grows; kept
together (``session``, ``prefix``, ``score``), each holds its share. So with a router the
planner simulates the fleet itself: N engines of the candidate behind the policy on one
clock (:mod:`servetune.sim.replicas`, the gateway's own routing code), the whole traffic at
the peak rate, and the SLO is judged on the fleet's requests as the planner judges one
replica's (:func:`~servetune.plan.simulate.measure`, :func:`~servetune.plan.capacity.margin`:
every P99 within its SLO and the requests in flight not growing).

:func:`find_replicas` tries 1, 2, 4, … replicas up to ``max_replicas`` and bisects between
the last count that missed and the first that held (a fleet of more replicas of one
configuration holds at least what a smaller one holds). :func:`confirm_replicas` runs the
count found on :data:`~servetune.plan.capacity.DRAWS` independent draws of the traffic and
adds a replica while any draw misses — a confirmation only adds replicas, as the single
replica's only lowers a rate.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from pydantic import BaseModel, Field

from servetune.arch.memory import MemoryPlan
from servetune.plan.capacity import (
    MAX_STEPS,
    MIN_SPAN_S,
    describe_miss,
    draws_margin,
    margin,
    misses,
    requests_at,
)
from servetune.plan.simulate import Point, measure
from servetune.plan.workload import Workload, offsets_at
from servetune.results import server_series as ss
from servetune.results.record import RequestRecord
from servetune.results.schema import BenchConfig, Slo
from servetune.routing.config import RoutingConfig
from servetune.sim.offline_plan import workload_plan
from servetune.sim.replicas import run_replicas
from servetune.sim.resolved import ResolvedConfig
from servetune.workload.plan import Plan


class FleetTraffic(BaseModel):
    """What a fleet is planned for: the request lengths (:class:`Workload`), or sessions —
    a ``multiturn`` BenchConfig whose rate counts requests/s (set per simulation); the peak
    rate; the replica counts allowed (``replicas``: that count only)."""

    sessions: BenchConfig | None = None
    peak_rate: float = Field(gt=0)
    max_replicas: int = Field(64, ge=1)
    replicas: int | None = Field(None, ge=1)


def fleet_plan(
    w: Workload, traffic: FleetTraffic, rate: float, n: int, draw: int, span_s: float = 0.0
) -> Plan:
    """The traffic at ``rate`` req/s, draw ``draw`` (0: the search's): ``n`` requests; for
    sessions, as many sessions as make ``n`` turns or start over ``span_s`` seconds."""
    cfg = traffic.sessions
    if cfg is None:
        wd = w.redrawn(draw)
        k = min(n, len(wd.specs))
        return Plan(requests=wd.specs[:k], offsets_ns=offsets_at(wd, rate, k))
    per_s = rate / cfg.multiturn.mean_turns
    sessions = max(2, math.ceil(n / cfg.multiturn.mean_turns), math.ceil(per_s * span_s))
    drawn = cfg.model_copy(
        update={"request_rate": rate, "num_prompts": sessions, "seed": cfg.seed + 7919 * draw}
    )
    plan, _name, _exact = workload_plan(drawn)
    return plan


TPOT_GUESS_S = 0.05
"""A first guess of the time per output token (s), to size the first simulation of session
traffic (a turn lasts about its answer's tokens × this) when no lifetime was measured."""


def session_lifetime_s(recs: list[RequestRecord]) -> float | None:
    """The median time from a session's first send to its last answer (complete sessions)."""
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    seen: dict[str, list[int]] = {}
    """Session → [turns seen, turns planned]."""
    for x in recs:
        sid = x.session
        if sid is None or x.session_turns is None:
            continue
        first[sid] = min(first.get(sid, x.send_ns), x.send_ns)
        last[sid] = max(last.get(sid, x.end_ns), x.end_ns)
        got = seen.setdefault(sid, [0, x.session_turns])
        got[0] += 1
    done = [(last[s] - first[s]) / 1e9 for s, (k, of) in seen.items() if k == of]
    return float(np.median(done)) if done else None


def fleet_point(
    r: ResolvedConfig,
    mem: MemoryPlan,
    w: Workload,
    traffic: FleetTraffic,
    rate: float,
    n: int,
    replicas: int,
    policy: str,
    draw: int = 0,
    life_guess_s: float | None = None,
) -> Point:
    """``replicas`` engines of ``r`` behind ``policy`` under the traffic at ``rate``.

    Session traffic is measured once the sessions live at once stop growing: a session lasts
    its turns' latencies and think times, and the fleet's load is that of the sessions
    started within one lifetime. The first simulation is sized on a guess of it
    (``life_guess_s``: a lifetime measured before — the caller's, so that what is simulated
    never depends on which worker process ran what before; else from :data:`TPOT_GUESS_S`);
    when the sessions measured lasted longer than the guess left room for, the traffic is
    simulated again over one lifetime more than :data:`~servetune.plan.capacity.MIN_SPAN_S`,
    and the requests scheduled in that first lifetime are left out. The point records the
    lifetime measured."""
    n_req = requests_at(rate, n)
    routing = RoutingConfig(policy=policy)  # type: ignore[arg-type]
    mt = traffic.sessions.multiturn if traffic.sessions is not None else None
    span_s = 0.0
    life: float | None = None
    if mt is not None and traffic.sessions is not None:
        out_len = traffic.sessions.random_output_len
        guess = mt.mean_turns * (mt.think_time_s + out_len * TPOT_GUESS_S)
        span_s = MIN_SPAN_S + 1.2 * (life_guess_s if life_guess_s is not None else guess)
    for attempt in range(2):
        plan = fleet_plan(w, traffic, rate, n_req, draw, span_s)
        cfg = traffic.sessions or BenchConfig(num_prompts=len(plan.requests))
        cfg = cfg.model_copy(update={"request_rate": rate})
        done = run_replicas(plan, cfg, r, mem, replicas, routing, lean=True)
        starts = plan.session_offsets_ns if plan.session_offsets_ns is not None else plan.offsets_ns
        span = starts[-1] if starts else 0
        warmup = 0
        if mt is not None:
            life = session_lifetime_s(done.records) or 0.0
            warmup = round(life * 1e9)
            if attempt == 0 and span / 1e9 < life + 0.75 * MIN_SPAN_S:
                span_s = 1.2 * life + MIN_SPAN_S
                continue
        break
    samples = [
        (s.t, s.values.get(ss.KV_CACHE_USAGE, 0.0), s.values.get(ss.RUNNING, 0.0))
        for run in done.runs
        for s in run.series
    ]
    point = measure(
        done.records,
        span,
        rate,
        samples,
        sum(run.eng.counters.preemptions for run in done.runs),
        done.hit_rate(),
        warmup,
    )
    point.session_lifetime_s = life
    return point


class FleetCapacity(BaseModel):
    """The fewest replicas behind the router that held the peak (on the search's draw)."""

    policy: str
    replicas: int | None = None
    """None: no count up to ``max_replicas`` held."""
    at: Point | None = None
    """The fleet's point at ``replicas``."""
    below: Point | None = None
    """The point of the largest count that missed (``below_replicas``)."""
    below_replicas: int | None = None
    limiting_metric: str | None = None
    reason: str | None = None
    evaluations: int = 0


def find_replicas(
    run: Callable[[int], Point], slo: Slo, max_replicas: int, policy: str, fixed: int | None
) -> FleetCapacity:
    """The fewest replicas ``run(count)`` holds the SLO with (``fixed``: that count only)."""
    out = FleetCapacity(policy=policy)
    tried: dict[int, Point] = {}

    def holds(k: int) -> bool:
        tried[k] = run(k)
        out.evaluations += 1
        return margin(tried[k], slo) <= 1.0

    lo, hi = 0, None  # lo missed (0: none tried), hi held
    if fixed is not None:
        if holds(fixed):
            hi = fixed
        else:
            lo = fixed
    else:
        k = 1
        while True:
            if holds(k):
                hi = k
                break
            lo = k
            if k >= max_replicas:
                break
            k = min(2 * k, max_replicas)
        while hi is not None and hi - lo > 1:
            mid = (lo + hi) // 2
            if holds(mid):
                hi = mid
            else:
                lo = mid
    if lo:
        out.below, out.below_replicas = tried[lo], lo
        missed = misses(tried[lo], slo)
        out.limiting_metric = missed[0] if missed else None
    if hi is None:
        what = fleet_miss(tried[lo], slo)
        out.reason = f"{lo} replicas behind {policy} miss the SLO at the peak: {what}"
        return out
    out.replicas, out.at = hi, tried[hi]
    return out


def fleet_miss(p: Point, slo: Slo) -> str:
    """What a fleet's point missed; a point with no request measured is a fleet whose
    sessions outlasted the traffic simulated (their load never stopped growing)."""
    if p.completed and p.ttft_p99_ms is None:
        return (
            "requests pile up: no session's turn was measured past the sessions' ramp-up — "
            "the sessions outlasted the traffic simulated"
        )
    return "; ".join(describe_miss(p, slo, m) for m in misses(p, slo))


class FleetConfirmation(BaseModel):
    """A fleet's replica count checked on independent draws of the traffic."""

    searched_replicas: int
    replicas: int | None = None
    """The fewest replicas tried at which the SLO held on every draw; None: none did."""
    draws: list[Point] = Field(default_factory=list)
    missed: list[Point] = Field(default_factory=list)
    """The draws at the largest count that missed."""
    missed_replicas: int | None = None
    evaluations: int = 0


def confirm_replicas(
    searched: int,
    slo: Slo,
    run_draws: Callable[[int], list[Point]],
    max_replicas: int,
    max_steps: int = MAX_STEPS,
) -> FleetConfirmation:
    """Check ``searched`` replicas on the draws ``run_draws(count)`` simulates; while some
    draw misses (:func:`~servetune.plan.capacity.draws_margin`), one replica more."""
    out = FleetConfirmation(searched_replicas=searched)
    k = searched
    for _ in range(max_steps):
        if k > max_replicas:
            break
        points = run_draws(k)
        out.evaluations += len(points)
        if draws_margin(points, slo) <= 1.0:
            out.replicas, out.draws = k, points
            return out
        out.missed, out.missed_replicas = points, k
        k += 1
    return out
