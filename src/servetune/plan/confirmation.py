"""The rows shown, confirmed on independent draws of the traffic.

The search's SLO-max rate is found on one draw of the traffic (optimistic: it is the highest
rate that passed on that draw, by an amount that differs from candidate to candidate). The
first rows of the ranking — the table's, :data:`~servetune.plan.request.CONFIRM_ROWS` by
default — are therefore confirmed on :data:`~servetune.plan.capacity.DRAWS` independent draws
(:func:`~servetune.plan.capacity.confirm`): each one's SLO-max rate steps down until the SLO
holds on every draw, and its replicas, $/hour, headroom and costs are recomputed from the
confirmed rate (a candidate refuted at every rate tried misses the SLO). The candidates are
then ranked again and those that moved into the first rows are confirmed in turn, until the
first rows are all confirmed ones (:func:`confirm_ranking`). A confirmation only lowers a rate,
so it only raises a candidate's ranking key (:func:`~servetune.plan.pricing.rank_key`): the
candidates left unconfirmed below the confirmed rows could not rank above them
(``PlanResult.settled_rows``). The draws run in the search's worker processes when it has them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor

from servetune.cost.formula import token_cost
from servetune.plan.capacity import (
    DRAWS,
    Confirmation,
    confirm,
    describe_draws_miss,
    draws_misses,
    spread,
    worst,
)
from servetune.plan.fleet import FleetConfirmation, confirm_replicas
from servetune.plan.pricing import pp, rank, set_fleet, set_replicas
from servetune.plan.request import PlanRequest
from servetune.plan.simulate import Point
from servetune.plan.space import Candidate
from servetune.plan.workers import draw, draw_fleet
from servetune.results.plan_file import PlannedCandidate, PlannedPoint, PlanResult

EXTRA_CONFIRMS = 8
"""Confirmations allowed beyond the rows asked for (a row confirmed lower can fall out of
them and let the next one in); each is :data:`~servetune.plan.capacity.DRAWS` simulations
per rate tried, and the budget of 60 s for ≥ 100 candidates cannot spare an unbounded loop."""


def confirm_ranking(
    req: PlanRequest,
    cands: list[Candidate],
    result: PlanResult,
    pool: Executor | None,
    say: Callable[[str], None],
    lifetimes: dict[str, float | None] | None = None,
) -> tuple[PlannedCandidate | None, int]:
    """Confirm the first ``req.confirm_rows`` candidates that hold the traffic on independent
    draws, rank again, and confirm those that moved into the first rows, until they all are
    confirmed ones (at most ``confirm_rows`` + :data:`EXTRA_CONFIRMS` confirmations). Then
    the ranking of those rows is settled: a confirmation only lowers a rate — so only raises
    a candidate's ranking key ($/hour, then headroom, then the rate) — and a candidate left
    unconfirmed below them could not rank above them once confirmed. Returns the winner and
    the simulations run. ``lifetimes``: a fleet row's session lifetime measured by its
    search (by label), its draws' first guess."""
    by_label = {c.label: c for c in cands}
    done: dict[str, Confirmation | FleetConfirmation] = {}
    runs = 0
    budget = req.confirm_rows + EXTRA_CONFIRMS
    while True:
        result.candidates = rank(result.candidates)
        ok = [c for c in result.candidates if c.status == "ok"]
        todo = [c for c in ok[: req.confirm_rows] if c.label not in done]
        todo = todo[: budget - len(done)]
        if not todo:
            break
        rows = f"{len(todo)} rows" if len(todo) > 1 else "1 row"
        say(f"confirming {rows} on {DRAWS} independent draws of the traffic …")
        confs = _confirm_each(req, [by_label[c.label] for c in todo], todo, pool, lifetimes or {})
        for c, conf in zip(todo, confs, strict=True):
            runs += conf.evaluations
            done[c.label] = conf
            if isinstance(conf, FleetConfirmation):
                _apply_fleet_confirmation(req, c, conf)
                held = _fleet_held(conf)
            else:
                _apply_confirmation(req, c, conf)
                held = _held(conf)
            say(f"confirmed {c.label} on {DRAWS} independent draws: {held}")
    top = ok[0] if ok else None
    if top is None:
        result.confirmed = result.confirmed_meets_slo = None
        return None, runs
    if top.label in done:
        result.confirmed = pp(worst(done[top.label].draws, req.slo))
        result.confirmed_meets_slo = True
        return top, runs
    result.confirmed = result.confirmed_meets_slo = None
    result.warnings.append(
        f"stopped confirming after {len(done)} candidates: the winner's SLO-max rate is the "
        "search's one draw, not confirmed on independent draws"
    )
    return top, runs


def _confirm_each(
    req: PlanRequest,
    cands: list[Candidate],
    rows: list[PlannedCandidate],
    pool: Executor | None,
    lifetimes: dict[str, float | None],
) -> list[Confirmation | FleetConfirmation]:
    """Each row's confirmation; with worker processes, all of them at once (one thread per
    row hands its draws to the pool, so the pool is never idle between two rows' steps)."""

    def one(i: int) -> Confirmation | FleetConfirmation:
        if cands[i].router is not None:
            k = rows[i].replicas
            assert k is not None
            limit = req.replicas or req.max_replicas
            runner = _fleet_runner(cands[i], pool, lifetimes.get(cands[i].label))
            return confirm_replicas(k, req.slo, runner, limit)
        rate = rows[i].slo_max_rate_per_replica
        assert rate is not None
        return confirm(rate, req.slo, _draws_runner(cands[i], pool))

    if pool is None or len(rows) == 1:
        return [one(i) for i in range(len(rows))]
    with ThreadPoolExecutor(max_workers=len(rows)) as threads:
        return list(threads.map(one, range(len(rows))))


def _draws_runner(cand: Candidate, pool: Executor | None) -> Callable[[float], list[Point]]:
    def run(rate: float) -> list[Point]:
        draws = range(1, DRAWS + 1)
        if pool is None:
            return [draw(cand, rate, d) for d in draws]
        return [f.result() for f in [pool.submit(draw, cand, rate, d) for d in draws]]

    return run


def _fleet_runner(
    cand: Candidate, pool: Executor | None, life: float | None
) -> Callable[[int], list[Point]]:
    def run(replicas: int) -> list[Point]:
        draws = range(1, DRAWS + 1)
        if pool is None:
            return [draw_fleet(cand, replicas, d, life) for d in draws]
        futs = [pool.submit(draw_fleet, cand, replicas, d, life) for d in draws]
        return [f.result() for f in futs]

    return run


def _fleet_held(conf: FleetConfirmation) -> str:
    if conf.replicas is None:
        return f"refuted up to {conf.missed_replicas} replicas"
    if conf.replicas > conf.searched_replicas:
        return f"{conf.searched_replicas} → {conf.replicas} replicas"
    return f"{conf.replicas} replicas held"


def _apply_fleet_confirmation(
    req: PlanRequest, c: PlannedCandidate, conf: FleetConfirmation
) -> None:
    """A fleet's shown figures become the confirmed ones: replicas, the point at the peak,
    $/hour, costs; refuted (no count up to the limit held on every draw), no figure."""
    c.confirm_draws = DRAWS
    c.simulations += conf.evaluations
    what = f"{DRAWS} independent draws of the traffic"
    if conf.replicas is not None and conf.replicas == conf.searched_replicas:
        c.draws = _keep(conf.draws)
        return
    c.search_replicas = conf.searched_replicas
    missed = describe_draws_miss(conf.missed, req.slo)
    c.limiting_metric = draws_misses(conf.missed, req.slo)[1][0]
    if conf.replicas is None:
        c.draws = _keep(conf.missed)
        c.status = "misses_slo" if req.replicas is not None else "too_many_replicas"
        _clear(c)
        c.slo_max_rate_per_replica = c.at_slo = c.concurrency_at_slo = None
        c.reason = (
            f"{conf.searched_replicas} replicas behind {c.router} held the peak on the search's "
            f"draw of the traffic, not on {what} up to {conf.missed_replicas} replicas: {missed}"
        )
        return
    c.draws = _keep(conf.draws)
    at = worst(conf.draws, req.slo)
    set_fleet(c, req, conf.replicas, at)
    c.notes.append(
        f"{conf.searched_replicas} replicas held the peak on the search's draw; on {what}, "
        f"with {conf.missed_replicas}: {missed}; held on all {DRAWS} with {conf.replicas} "
        f"({spread(conf.draws, req.slo)})"
    )


def _held(conf: Confirmation) -> str:
    if conf.rate is None:
        return f"refuted down to {conf.missed_rate:.3g} req/s"
    if conf.rate < conf.searched_rate:
        return f"{conf.searched_rate:.3g} → {conf.rate:.3g} req/s per replica"
    return f"{conf.rate:.3g} req/s per replica held"


def _apply_confirmation(req: PlanRequest, c: PlannedCandidate, conf: Confirmation) -> None:
    """The candidate's shown figures become the confirmed ones: SLO-max rate, the point at
    it, replicas, $/hour, headroom, costs — none is left from a refuted search."""
    c.confirm_draws = DRAWS
    c.simulations += conf.evaluations
    n_req = (conf.draws or conf.missed)[0].requests
    what = f"{DRAWS} independent draws of {n_req:,} requests (other arrivals and request order)"
    if conf.rate is not None and conf.rate >= conf.searched_rate:
        c.draws = _keep(conf.draws)
        return
    c.search_slo_max_rate = conf.searched_rate
    missed = describe_draws_miss(conf.missed, req.slo)
    c.limiting_metric = draws_misses(conf.missed, req.slo)[1][0]
    if conf.rate is None:
        c.draws = _keep(conf.missed)
        c.status = "misses_slo"
        _clear(c)
        c.reason = (
            f"the SLO held at {conf.searched_rate:.3g} req/s per replica on the search's draw "
            f"of the traffic, not on {what}: {missed}"
        )
        return
    c.draws = _keep(conf.draws)
    at = worst(conf.draws, req.slo)
    c.slo_max_rate_per_replica = conf.rate
    c.at_slo = pp(at)
    c.concurrency_at_slo = at.running_mean
    assert c.usd_per_gpu_hour is not None
    c.slo_limit_output_usd_per_mtok = token_cost(
        c.usd_per_gpu_hour * c.gpus_per_replica, at.input_tok_s, at.output_tok_s, req.r
    ).output_usd_per_mtok
    note = (
        f"SLO-max {conf.searched_rate:.3g} req/s per replica on the search's draw; on {what} "
        f"{missed}; held on all {DRAWS} at {conf.rate:.3g} req/s ({spread(conf.draws, req.slo)})"
    )
    c.notes.append(note)
    replicas = max(1, math.ceil(req.peak_rate / conf.rate - 1e-9))
    if replicas > req.max_replicas:
        c.status = "too_many_replicas"
        _clear(c)
        c.reason = (
            f"holds {conf.rate:.3g} req/s per replica at the SLO on {DRAWS} independent draws: "
            f"{replicas} replicas needed for {req.peak_rate:g} req/s, more than --max-replicas "
            f"{req.max_replicas}"
        )
        return
    set_replicas(c, req, replicas, req.workload)


def _keep(points: list[Point]) -> list[PlannedPoint]:
    return [kept for p in points if (kept := pp(p)) is not None]


def _clear(c: PlannedCandidate) -> None:
    """No figure of a deployment that was not confirmed: replicas, $/hour, headroom, costs."""
    if c.status == "misses_slo":
        c.slo_max_rate_per_replica = c.at_slo = c.concurrency_at_slo = None
        c.slo_limit_output_usd_per_mtok = None
    c.replicas = c.gpus_total = c.usd_per_hour = c.headroom = None
    c.input_usd_per_mtok = c.output_usd_per_mtok = c.blended_usd_per_mtok = None
