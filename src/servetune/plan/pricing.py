"""A candidate's figures in dollars and its place in the ranking: steps 3–4 of
:mod:`servetune.plan.search` — replicas, GPUs, $/hour, headroom and $/Mtok from a worker's
:class:`~servetune.plan.workers.Outcome` and the GPU's price (:func:`price`,
:func:`set_replicas`); cheapest first (:func:`rank_key`, :func:`rank`)."""

from __future__ import annotations

import math

from servetune.cost.formula import token_cost
from servetune.cost.prices import PriceBook
from servetune.plan.fleet import FleetCapacity, fleet_miss
from servetune.plan.notes import AWQ_NOTE
from servetune.plan.request import PlanRequest
from servetune.plan.simulate import Point
from servetune.plan.space import PREQUANTIZED, Candidate
from servetune.plan.workers import Outcome
from servetune.plan.workload import Workload
from servetune.results.plan_file import PlannedCandidate, PlannedPoint


def pp(p: Point | None) -> PlannedPoint | None:
    if p is None:
        return None
    return PlannedPoint(
        rate=None if math.isinf(p.rate) else p.rate,
        requests=p.requests,
        request_throughput=p.request_throughput,
        input_tok_s=p.input_tok_s,
        output_tok_s=p.output_tok_s,
        ttft_p99_ms=p.ttft_p99_ms,
        tpot_p50_ms=p.tpot_p50_ms,
        tpot_p99_ms=p.tpot_p99_ms,
        e2el_p99_ms=p.e2el_p99_ms,
        kv_cache_usage_mean=p.kv_cache_usage_mean,
        running_mean=p.running_mean,
        preemptions=p.preemptions,
        prefix_cache_hit_rate=p.prefix_cache_hit_rate,
    )


def price(req: PlanRequest, prices: PriceBook, cand: Candidate, o: Outcome) -> PlannedCandidate:
    base = PlannedCandidate(
        label=cand.label,
        gpu=cand.engine.resolve().gpu.name if o.refused is None else cand.gpu,
        tensor_parallel_size=cand.tensor_parallel_size,
        data_parallel_size=cand.data_parallel_size,
        enable_expert_parallel=cand.enable_expert_parallel,
        engine=cand.engine_name,
        quantization=cand.quantization,
        knob_set=cand.knob_set,
        knobs=cand.knobs,
        status="cannot_start",
        reason=o.refused,
        vllm_serve=o.vllm_serve,
        kv_cache_tokens=o.kv_cache_tokens,
        engine_kv_tokens=o.engine_kv_tokens,
        max_concurrency_at_max_len=o.max_concurrency,
        router=cand.router,
        notes=list(o.calibration_notes),
    )
    if o.refused is None and o.fleet is not None:
        return _price_fleet(req, prices, cand, o.fleet, base)
    if o.refused is not None or o.capacity is None:
        return base
    cap = o.capacity
    price = prices.price(base.gpu).usd_per_gpu_hour
    tp = cand.gpus_per_replica
    w = req.workload
    base.usd_per_gpu_hour = price
    base.simulations = cap.evaluations
    base.saturation = pp(cap.saturation)
    base.at_slo = pp(cap.at_slo)
    base.limiting_metric = cap.limiting_metric
    sat = cap.saturation
    if sat.completed:
        base.saturation_output_usd_per_mtok = token_cost(
            price * tp, sat.input_tok_s, sat.output_tok_s, req.r
        ).output_usd_per_mtok
    if cand.quantization in PREQUANTIZED:
        base.notes.append(AWQ_NOTE.format(q=cand.quantization.upper()))
    if cap.slo_max_rate is None or cap.at_slo is None:
        base.status = "misses_slo"
        base.reason = cap.reason
        return base
    base.slo_max_rate_per_replica = cap.slo_max_rate
    base.concurrency_at_slo = cap.at_slo.running_mean
    base.slo_limit_output_usd_per_mtok = token_cost(
        price * tp, cap.at_slo.input_tok_s, cap.at_slo.output_tok_s, req.r
    ).output_usd_per_mtok
    replicas = max(1, math.ceil(req.peak_rate / cap.slo_max_rate - 1e-9))
    if replicas > req.max_replicas:
        base.status = "too_many_replicas"
        base.reason = (
            f"holds {cap.slo_max_rate:.3g} req/s per replica at the SLO: {replicas} replicas "
            f"needed for {req.peak_rate:g} req/s, more than --max-replicas {req.max_replicas}"
        )
        return base
    set_replicas(base, req, replicas, w)
    base.status = "ok"
    return base


def _price_fleet(
    req: PlanRequest, prices: PriceBook, cand: Candidate, f: FleetCapacity, base: PlannedCandidate
) -> PlannedCandidate:
    """A fleet behind a router (:mod:`servetune.plan.fleet`): its replicas are the fewest
    that held the peak; each held the peak ÷ replicas behind it."""
    base.usd_per_gpu_hour = prices.price(base.gpu).usd_per_gpu_hour
    base.simulations = f.evaluations
    base.limiting_metric = f.limiting_metric
    if cand.quantization in PREQUANTIZED:
        base.notes.append(AWQ_NOTE.format(q=cand.quantization.upper()))
    if f.replicas is None or f.at is None:
        base.status = "too_many_replicas" if req.replicas is None else "misses_slo"
        base.reason = f.reason
        base.at_slo = pp(f.below)
        return base
    set_fleet(base, req, f.replicas, f.at)
    if f.below is not None and f.below_replicas is not None:
        base.notes.append(fewer_note(f.below_replicas, f.policy, f.below, req))
    base.status = "ok"
    return base


def fewer_note(k: int, policy: str, p: Point, req: PlanRequest) -> str:
    what = fleet_miss(p, req.slo)
    hit = (
        f", prefix-cache hit rate {p.prefix_cache_hit_rate:.0%}"
        if p.prefix_cache_hit_rate is not None
        else ""
    )
    return f"{k} replicas behind {policy} missed at {req.peak_rate:g} req/s: {what}{hit}"


def set_fleet(base: PlannedCandidate, req: PlanRequest, replicas: int, at: Point) -> None:
    """A fleet's figures from its point at the peak with ``replicas``."""
    assert base.usd_per_gpu_hour is not None
    base.slo_max_rate_per_replica = req.peak_rate / replicas
    base.at_slo = pp(at)
    base.concurrency_at_slo = None if at.running_mean is None else at.running_mean
    base.slo_limit_output_usd_per_mtok = token_cost(
        base.usd_per_gpu_hour * base.gpus_per_replica * replicas,
        at.input_tok_s,
        at.output_tok_s,
        req.r,
    ).output_usd_per_mtok
    set_replicas(base, req, replicas, req.workload)
    base.headroom = None


def set_replicas(base: PlannedCandidate, req: PlanRequest, replicas: int, w: Workload) -> None:
    assert base.usd_per_gpu_hour is not None and base.slo_max_rate_per_replica is not None
    base.replicas = replicas
    base.gpus_total = replicas * base.gpus_per_replica
    base.usd_per_hour = base.gpus_total * base.usd_per_gpu_hour
    base.headroom = replicas * base.slo_max_rate_per_replica / req.peak_rate - 1
    avg = req.average_rate if req.average_rate is not None else req.peak_rate
    c = token_cost(base.usd_per_hour, avg * w.mean_input, avg * w.mean_output, req.r)
    base.input_usd_per_mtok = c.input_usd_per_mtok
    base.output_usd_per_mtok = c.output_usd_per_mtok
    base.blended_usd_per_mtok = c.blended_usd_per_mtok


_ORDER = {"ok": 0, "too_many_replicas": 1, "misses_slo": 2, "cannot_start": 3}


def rank_key(c: PlannedCandidate) -> tuple[int, float, float, float, str]:
    """Cheapest first; ties: more headroom, then a higher SLO-max rate. A confirmation only
    lowers a candidate's rate — so its headroom, and it only adds replicas and $/hour or takes
    the candidate out of those that hold the traffic — so it only raises this key."""
    return (
        _ORDER[c.status],
        c.usd_per_hour if c.usd_per_hour is not None else math.inf,
        -(c.headroom or 0.0),
        -(c.slo_max_rate_per_replica or 0.0),
        c.label,
    )


def rank(cands: list[PlannedCandidate]) -> list[PlannedCandidate]:
    return sorted(cands, key=rank_key)
