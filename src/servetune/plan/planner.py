"""The planner: every candidate deployment on the simulated engine, ranked by $/hour.

For each candidate (one replica's configuration, :mod:`servetune.plan.space`):

1. the memory planner decides whether it starts (vLLM's refusals, in vLLM's words);
2. :func:`~servetune.plan.capacity.find_capacity` finds its SLO-max rate per replica and its
   saturated throughput;
3. replicas = ⌈peak rate ÷ SLO-max rate⌉ (at most ``max_replicas``), GPUs = replicas × TP,
   $/hour = GPUs × the GPU's price, headroom = replicas × SLO-max rate ÷ peak − 1;
4. $/Mtok at the planned traffic (:mod:`servetune.cost.formula`; the average rate when given,
   else the peak), at the SLO limit (every replica at its SLO-max rate) and saturated.

The search's SLO-max rate is found on one draw of the traffic (optimistic: it is the highest
rate that passed on that draw, by an amount that differs from candidate to candidate). The
first rows of the ranking — the table's, :data:`CONFIRM_ROWS` by default — are therefore
confirmed on :data:`~servetune.plan.capacity.DRAWS` independent draws
(:func:`~servetune.plan.capacity.confirm`): each one's SLO-max rate steps down until the SLO
holds on every draw, and its replicas, $/hour, headroom and costs are recomputed from the
confirmed rate (a candidate refuted at every rate tried misses the SLO). The candidates are
then ranked again and those that moved into the first rows are confirmed in turn, until the
first rows are all confirmed ones (:func:`_confirm`). A confirmation only lowers a rate, so it
only raises a candidate's ranking key (:func:`rank_key`): the candidates left unconfirmed
below the confirmed rows could not rank above them (``PlanResult.settled_rows``). Candidates
and draws run in worker processes (one per core by default).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from contextlib import ExitStack
from datetime import UTC, datetime
from multiprocessing import get_context
from typing import Any

from pydantic import BaseModel, ConfigDict

from servetune.cost.formula import FORMULA, token_cost
from servetune.cost.prices import PriceBook
from servetune.errors import ConfigError, SimError
from servetune.plan.capacity import (
    DRAWS,
    Capacity,
    Confirmation,
    confirm,
    describe_draws_miss,
    draws_misses,
    find_capacity,
    simulate_draw,
    spread,
    worst,
)
from servetune.plan.simulate import Point
from servetune.plan.space import Candidate
from servetune.plan.workload import Workload
from servetune.results.plan_file import PlannedCandidate, PlannedPoint, PlanResult
from servetune.results.schema import Slo
from servetune.sim.memory import plan_memory

AWQ_NOTE = (
    "serve a pre-quantized {q} checkpoint of the model (vLLM cannot quantize to {q} at load "
    "time); the name above is the base model's"
)

CONFIRM_ROWS = 12
"""Rows of the ranking confirmed by default: the table's (``servetune plan --top``)."""


class PlanRequest(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    model: str
    peak_rate: float
    average_rate: float | None = None
    slo: Slo
    candidates: list[Candidate]
    workload: Workload
    requests_per_point: int = 1000
    max_replicas: int = 64
    r: float = 4.0
    workers: int | None = None
    confirm_rows: int = CONFIRM_ROWS
    """The first rows of the ranking confirmed on independent draws (:func:`_confirm`)."""


class _Outcome(BaseModel):
    """What a worker found for one candidate (no prices: those are the parent's)."""

    index: int
    refused: str | None = None
    vllm_serve: str | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    capacity: Capacity | None = None


_W: dict[str, Any] = {}


def _init(workload: Workload, slo: Slo, n: int) -> None:
    _W.update(workload=workload, slo=slo, n=n)


def _evaluate(index: int, cand: Candidate) -> _Outcome:
    try:
        r = cand.engine.resolve()
        mem = plan_memory(r)
    except SimError as exc:
        return _Outcome(index=index, refused=exc.message)
    serve = "vllm serve " + " ".join(cand.engine.vllm_args())
    cap = find_capacity(r, mem, _W["workload"], _W["slo"], _W["n"])
    return _Outcome(
        index=index,
        vllm_serve=serve,
        kv_cache_tokens=mem.kv_cache_tokens,
        max_concurrency=mem.max_concurrency,
        capacity=cap,
    )


def _draw(cand: Candidate, rate: float, draw: int) -> Point:
    """One independent draw of the traffic at ``rate`` on one replica of ``cand``."""
    r = cand.engine.resolve()
    return simulate_draw(r, plan_memory(r), _W["workload"], rate, _W["n"], draw)


def _pp(p: Point | None) -> PlannedPoint | None:
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
    )


def _dedupe(cands: list[Candidate]) -> tuple[list[Candidate], list[str]]:
    seen: dict[str, Candidate] = {}
    out: list[Candidate] = []
    notes: list[str] = []
    for c in cands:
        try:
            summary = c.engine.resolve().summary()
            summary.pop("defaults_applied", None)  # a knob set to its default is the default
            key = json.dumps(summary, sort_keys=True, default=str)
        except SimError:
            key = c.label
        if key in seen:
            notes.append(f"{c.label} is the same configuration as {seen[key].label}: planned once")
            continue
        seen[key] = c
        out.append(c)
    return out, notes


def _price(req: PlanRequest, prices: PriceBook, cand: Candidate, o: _Outcome) -> PlannedCandidate:
    base = PlannedCandidate(
        label=cand.label,
        gpu=cand.engine.resolve().gpu.name if o.refused is None else cand.gpu,
        tensor_parallel_size=cand.tensor_parallel_size,
        quantization=cand.quantization,
        knob_set=cand.knob_set,
        knobs=cand.knobs,
        status="cannot_start",
        reason=o.refused,
        vllm_serve=o.vllm_serve,
        kv_cache_tokens=o.kv_cache_tokens,
        max_concurrency_at_max_len=o.max_concurrency,
    )
    if o.refused is not None or o.capacity is None:
        return base
    cap = o.capacity
    price = prices.price(base.gpu).usd_per_gpu_hour
    tp = cand.tensor_parallel_size
    w = req.workload
    base.usd_per_gpu_hour = price
    base.simulations = cap.evaluations
    base.saturation = _pp(cap.saturation)
    base.at_slo = _pp(cap.at_slo)
    base.limiting_metric = cap.limiting_metric
    sat = cap.saturation
    if sat.completed:
        base.saturation_output_usd_per_mtok = token_cost(
            price * tp, sat.input_tok_s, sat.output_tok_s, req.r
        ).output_usd_per_mtok
    if cand.quantization in ("awq", "gptq"):
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
    _set_replicas(base, req, replicas, w)
    base.status = "ok"
    return base


def _set_replicas(base: PlannedCandidate, req: PlanRequest, replicas: int, w: Workload) -> None:
    assert base.usd_per_gpu_hour is not None and base.slo_max_rate_per_replica is not None
    base.replicas = replicas
    base.gpus_total = replicas * base.tensor_parallel_size
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


def make_plan(
    req: PlanRequest,
    prices: PriceBook,
    progress: Callable[[str], None] | None = None,
) -> PlanResult:
    if not req.peak_rate > 0 or math.isinf(req.peak_rate):
        raise ConfigError(f"the rate must be a positive number of req/s (got {req.peak_rate:g})")
    if req.average_rate is not None and not 0 < req.average_rate <= req.peak_rate:
        raise ConfigError(
            f"--rate {req.average_rate:g} must be > 0 and at most --peak-rate {req.peak_rate:g}"
        )
    if req.slo.is_empty():
        raise ConfigError(
            "a plan needs latency SLOs to hold", hint="e.g. --slo ttft:500 tpot:50 e2el:10000 (ms)"
        )
    if req.requests_per_point < 50:
        raise ConfigError("--requests-per-point must be ≥ 50 (P99 of fewer means little)")
    if req.max_replicas < 1:
        raise ConfigError("--max-replicas must be ≥ 1")
    if req.confirm_rows < 1:
        raise ConfigError("the rows to confirm must be ≥ 1 (the winner is always confirmed)")
    for gpu in dict.fromkeys(c.gpu for c in req.candidates):
        prices.price(gpu)  # fail before simulating anything when a price is missing
    t0 = time.perf_counter()
    cands, dup_notes = _dedupe(req.candidates)
    if not cands:
        raise ConfigError("no candidate deployment to plan")
    n = req.requests_per_point
    workers = req.workers or min(len(cands), os.cpu_count() or 1, 4)
    outcomes: dict[int, _Outcome] = {}
    say = progress or (lambda _m: None)
    with ExitStack() as stack:
        pool: Executor | None = None
        if workers <= 1:
            _init(req.workload, req.slo, n)
            for i, c in enumerate(cands):
                outcomes[i] = _evaluate(i, c)
                say(_progress_line(len(outcomes), len(cands), c, outcomes[i]))
        else:
            ctx = get_context("fork") if sys.platform.startswith("linux") else None
            pool = stack.enter_context(
                ProcessPoolExecutor(
                    max_workers=max(workers, 2),
                    mp_context=ctx,
                    initializer=_init,
                    initargs=(req.workload, req.slo, n),
                )
            )
            futures = [pool.submit(_evaluate, i, c) for i, c in enumerate(cands)]
            for fut in as_completed(futures):
                o = fut.result()
                outcomes[o.index] = o
                say(_progress_line(len(outcomes), len(cands), cands[o.index], o))
        result, sims = _assemble(req, prices, cands, outcomes, dup_notes)
        winner, confirms = _confirm(req, cands, result, pool, say)
    sims += confirms
    if winner is not None:
        _quality_note(result, winner)
    result.winner = winner
    result.simulations = sims
    result.elapsed_s = time.perf_counter() - t0
    return result


def _assemble(
    req: PlanRequest,
    prices: PriceBook,
    cands: list[Candidate],
    outcomes: dict[int, _Outcome],
    dup_notes: list[str],
) -> tuple[PlanResult, int]:
    n = req.requests_per_point
    planned = rank([_price(req, prices, cands[i], outcomes[i]) for i in range(len(cands))])
    sims = sum(c.simulations for c in planned)
    result = PlanResult(
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        command=["servetune", *sys.argv[1:]],
        model=req.model,
        peak_rate=req.peak_rate,
        average_rate=req.average_rate if req.average_rate is not None else req.peak_rate,
        slo=req.slo,
        workload=req.workload.source,
        mean_input_tokens=req.workload.mean_input,
        mean_output_tokens=req.workload.mean_output,
        requests_per_point=n,
        pricing=prices.pricing if not prices.overrides else f"{prices.pricing} + --price",
        r=req.r,
        formula=FORMULA,
        candidates=planned,
        warnings=dup_notes,
        confirm_draws=DRAWS,
    )
    return result, sims


EXTRA_CONFIRMS = 8
"""Confirmations allowed beyond the rows asked for (a row confirmed lower can fall out of
them and let the next one in); each is :data:`~servetune.plan.capacity.DRAWS` simulations
per rate tried, and the budget of 60 s for ≥ 100 candidates cannot spare an unbounded loop."""


def _confirm(
    req: PlanRequest,
    cands: list[Candidate],
    result: PlanResult,
    pool: Executor | None,
    say: Callable[[str], None],
) -> tuple[PlannedCandidate | None, int]:
    """Confirm the first ``req.confirm_rows`` candidates that hold the traffic on independent
    draws, rank again, and confirm those that moved into the first rows, until they all are
    confirmed ones (at most ``confirm_rows`` + :data:`EXTRA_CONFIRMS` confirmations). Then
    the ranking of those rows is settled: a confirmation only lowers a rate — so only raises
    a candidate's ranking key ($/hour, then headroom, then the rate) — and a candidate left
    unconfirmed below them could not rank above them once confirmed. Returns the winner and
    the simulations run."""
    by_label = {c.label: c for c in cands}
    done: dict[str, Confirmation] = {}
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
        confs = _confirm_each(req, [by_label[c.label] for c in todo], todo, pool)
        for c, conf in zip(todo, confs, strict=True):
            runs += conf.evaluations
            done[c.label] = conf
            _apply_confirmation(req, c, conf)
            say(f"confirmed {c.label} on {DRAWS} independent draws: {_held(conf)}")
    top = ok[0] if ok else None
    if top is None:
        result.confirmed = result.confirmed_meets_slo = None
        return None, runs
    if top.label in done:
        result.confirmed = _pp(worst(done[top.label].draws, req.slo))
        result.confirmed_meets_slo = True
        return top, runs
    result.confirmed = result.confirmed_meets_slo = None
    result.warnings.append(
        f"stopped confirming after {len(done)} candidates: the winner's SLO-max rate is the "
        "search's one draw, not confirmed on independent draws"
    )
    return top, runs


def _confirm_each(
    req: PlanRequest, cands: list[Candidate], rows: list[PlannedCandidate], pool: Executor | None
) -> list[Confirmation]:
    """Each row's confirmation; with worker processes, all of them at once (one thread per
    row hands its draws to the pool, so the pool is never idle between two rows' steps)."""

    def one(i: int) -> Confirmation:
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
            return [_draw(cand, rate, d) for d in draws]
        return [f.result() for f in [pool.submit(_draw, cand, rate, d) for d in draws]]

    return run


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
    c.at_slo = _pp(at)
    c.concurrency_at_slo = at.running_mean
    assert c.usd_per_gpu_hour is not None
    c.slo_limit_output_usd_per_mtok = token_cost(
        c.usd_per_gpu_hour * c.tensor_parallel_size, at.input_tok_s, at.output_tok_s, req.r
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
    _set_replicas(c, req, replicas, req.workload)


def _keep(points: list[Point]) -> list[PlannedPoint]:
    return [pp for p in points if (pp := _pp(p)) is not None]


def _clear(c: PlannedCandidate) -> None:
    """No figure of a deployment that was not confirmed: replicas, $/hour, headroom, costs."""
    if c.status == "misses_slo":
        c.slo_max_rate_per_replica = c.at_slo = c.concurrency_at_slo = None
        c.slo_limit_output_usd_per_mtok = None
    c.replicas = c.gpus_total = c.usd_per_hour = c.headroom = None
    c.input_usd_per_mtok = c.output_usd_per_mtok = c.blended_usd_per_mtok = None


def _quantized(c: PlannedCandidate) -> list[str]:
    """What of the model a candidate serves at reduced precision (weights, KV cache)."""
    out = []
    if c.quantization not in ("auto", "none"):
        out.append(f"{c.quantization.upper()} weights")
    kv = str(c.knobs.get("kv_cache_dtype", "auto"))
    if kv.startswith("fp8"):
        out.append(f"an {kv.upper()} KV cache")
    return out


def _quality_note(result: PlanResult, winner: PlannedCandidate) -> None:
    """A quantized winner is only a plan once its quality is checked (the seed: after
    quantizing, always run a quality regression); and when an unquantized candidate holds
    the same traffic for the same $/hour, the ranking's tie-break (headroom within the
    search's own tolerance) is no reason to take the quality risk — say so."""
    what = _quantized(winner)
    if not what or winner.usd_per_hour is None:
        return
    note = (
        f"it serves {' and '.join(what)}: check its answers against the unquantized model "
        "before serving it (`servetune quality --baseline URL --candidate URL`)"
    )
    plain = next(
        (
            c
            for c in result.candidates
            if c.status == "ok"
            and not _quantized(c)
            and c.usd_per_hour is not None
            and c.usd_per_hour <= winner.usd_per_hour * (1 + 1e-9)
        ),
        None,
    )
    if plain is not None and plain.headroom is not None and winner.headroom is not None:
        note += (
            f"; {plain.label} holds the same traffic unquantized for the same "
            f"${plain.usd_per_hour:,.2f}/hour (headroom {plain.headroom:+.0%} against "
            f"{winner.headroom:+.0%})"
        )
    winner.notes.append(note)


def _progress_line(done: int, total: int, c: Candidate, o: _Outcome) -> str:
    if o.refused is not None:
        what = f"cannot start: {o.refused[:70]}"
    elif o.capacity is not None and o.capacity.slo_max_rate is not None:
        what = f"{o.capacity.slo_max_rate:.3g} req/s per replica at the SLO"
    else:
        what = "misses the SLO at any rate"
    return f"[{done}/{total}] {c.label}: {what}"
