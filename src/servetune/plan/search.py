"""The planner: every candidate deployment on the simulated engine, ranked by $/hour
(:func:`make_plan`).

For each candidate (one replica's configuration, :mod:`servetune.plan.space`):

1. the memory planner decides whether it starts (vLLM's refusals, in vLLM's words);
2. :func:`~servetune.plan.capacity.find_capacity` finds its SLO-max rate per replica and its
   saturated throughput;
3. replicas = ⌈peak rate ÷ SLO-max rate⌉ (at most ``max_replicas``), GPUs = replicas × TP,
   $/hour = GPUs × the GPU's price, headroom = replicas × SLO-max rate ÷ peak − 1;
4. $/Mtok at the planned traffic (:mod:`servetune.cost.formula`; the average rate when given,
   else the peak), at the SLO limit (every replica at its SLO-max rate) and saturated.

Steps 1–2 run in :mod:`servetune.plan.workers`, 3–4 in :mod:`servetune.plan.pricing`; the
first rows of the ranking are then confirmed on independent draws
(:mod:`servetune.plan.confirmation`) and a quantized winner gets its note
(:mod:`servetune.plan.notes`). Candidates and draws run in worker processes (one per core by
default).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import Executor, ProcessPoolExecutor, as_completed
from contextlib import ExitStack
from datetime import UTC, datetime
from multiprocessing import get_context

from servetune.cost.formula import FORMULA
from servetune.cost.prices import PriceBook
from servetune.errors import ConfigError, SimError
from servetune.plan.capacity import DRAWS
from servetune.plan.confirmation import confirm_ranking
from servetune.plan.layouts import layout_notes
from servetune.plan.notes import quality_note
from servetune.plan.pricing import price, rank
from servetune.plan.request import PlanRequest
from servetune.plan.space import Candidate
from servetune.plan.workers import Outcome, evaluate, init
from servetune.results.plan_file import PlanResult


def _dedupe(cands: list[Candidate]) -> tuple[list[Candidate], list[str]]:
    seen: dict[str, Candidate] = {}
    out: list[Candidate] = []
    notes: list[str] = []
    for c in cands:
        try:
            summary = c.engine.resolve().summary()
            summary.pop("defaults_applied", None)  # a knob set to its default is the default
            key = json.dumps([summary, c.router], sort_keys=True, default=str)
        except SimError:
            key = c.label
        if key in seen:
            notes.append(f"{c.label} is the same configuration as {seen[key].label}: planned once")
            continue
        seen[key] = c
        out.append(c)
    return out, notes


def make_plan(
    req: PlanRequest,
    prices: PriceBook,
    progress: Callable[[str], None] | None = None,
) -> PlanResult:
    for gpu in dict.fromkeys(c.gpu for c in req.candidates):
        prices.price(gpu)  # fail before simulating anything when a price is missing
    t0 = time.perf_counter()
    cands, dup_notes = _dedupe(req.candidates)
    if not cands:
        raise ConfigError("no candidate deployment to plan")
    n = req.requests_per_point
    workers = req.workers or min(len(cands), os.cpu_count() or 1, 4)
    outcomes: dict[int, Outcome] = {}
    say = progress or (lambda _m: None)
    with ExitStack() as stack:
        pool: Executor | None = None
        if workers <= 1:
            init(req.workload, req.slo, n, req.fleet())
            for i, c in enumerate(cands):
                outcomes[i] = evaluate(i, c)
                say(_progress_line(len(outcomes), len(cands), c, outcomes[i]))
        else:
            ctx = get_context("fork") if sys.platform.startswith("linux") else None
            pool = stack.enter_context(
                ProcessPoolExecutor(
                    max_workers=max(workers, 2),
                    mp_context=ctx,
                    initializer=init,
                    initargs=(req.workload, req.slo, n, req.fleet()),
                )
            )
            futures = [pool.submit(evaluate, i, c) for i, c in enumerate(cands)]
            for fut in as_completed(futures):
                o = fut.result()
                outcomes[o.index] = o
                say(_progress_line(len(outcomes), len(cands), cands[o.index], o))
        result, sims = _assemble(req, prices, cands, outcomes, dup_notes)
        lifetimes = {
            cands[i].label: o.fleet.at.session_lifetime_s
            for i, o in outcomes.items()
            if o.fleet is not None and o.fleet.at is not None
        }
        winner, confirms = confirm_ranking(req, cands, result, pool, say, lifetimes)
    sims += confirms
    if winner is not None:
        quality_note(result, winner)
        winner.notes += layout_notes(result, winner)
    result.winner = winner
    result.simulations = sims
    result.elapsed_s = time.perf_counter() - t0
    return result


def _assemble(
    req: PlanRequest,
    prices: PriceBook,
    cands: list[Candidate],
    outcomes: dict[int, Outcome],
    dup_notes: list[str],
) -> tuple[PlanResult, int]:
    n = req.requests_per_point
    planned = rank([price(req, prices, cands[i], outcomes[i]) for i in range(len(cands))])
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
        routers=list(dict.fromkeys(c.router for c in cands if c.router is not None)),
        replicas=req.replicas,
        calibration=req.calibration,
    )
    if req.calibration is not None:
        result.warnings = _transferred(req, cands, outcomes) + result.warnings
    return result, sims


def _transferred(
    req: PlanRequest, cands: list[Candidate], outcomes: dict[int, Outcome]
) -> list[str]:
    """A plan-wide line per kind of calibration note (each candidate's are in its notes)."""
    assert req.calibration is not None
    kinds: dict[str, int] = {}
    for i in range(len(cands)):
        for n in outcomes[i].calibration_notes:
            kind = (
                "another device"
                if n.endswith("another device")
                else "another model"
                if n.endswith("another model")
                else "outside what it measured"
            )
            kinds[kind] = kinds.get(kind, 0) + 1
    ref = req.calibration
    out = []
    for kind, k in kinds.items():
        what = (
            f"its constants transferred to {kind}"
            if kind.startswith("another")
            else "questions outside what its runs measured"
        )
        out.append(
            f"calibration {ref.id} (measured on {ref.model}, {ref.device}): {k} of "
            f"{len(cands)} candidates — {what} (each candidate's notes in plan.json)"
        )
    return out


def _progress_line(done: int, total: int, c: Candidate, o: Outcome) -> str:
    if o.refused is not None:
        what = f"cannot start: {o.refused[:70]}"
    elif o.fleet is not None:
        f = o.fleet
        what = (
            f"{f.replicas} replicas behind {f.policy} hold the peak"
            if f.replicas is not None
            else (f.reason or "misses the SLO")[:90]
        )
    elif o.capacity is not None and o.capacity.slo_max_rate is not None:
        what = f"{o.capacity.slo_max_rate:.3g} req/s per replica at the SLO"
    else:
        what = "misses the SLO at any rate"
    return f"[{done}/{total}] {c.label}: {what}"
