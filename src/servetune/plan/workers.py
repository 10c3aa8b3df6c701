"""What runs in the planner's worker processes (a ``ProcessPoolExecutor``: these functions are
pickled by their module path): :func:`init` sets a worker's traffic and SLOs once,
:func:`evaluate` finds one candidate's start-up and capacity (the memory planner, then
:func:`~servetune.plan.capacity.find_capacity`), :func:`draw` simulates one independent draw of
the traffic for a confirmation."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from servetune.errors import SimError
from servetune.plan.capacity import Capacity, find_capacity, simulate_draw
from servetune.plan.fleet import FleetCapacity, FleetTraffic, find_replicas, fleet_point
from servetune.plan.simulate import Point
from servetune.plan.space import Candidate
from servetune.plan.workload import Workload
from servetune.results.schema import Slo
from servetune.sim.calibration_use import use_warnings
from servetune.sim.memory import plan_memory


class Outcome(BaseModel):
    """What a worker found for one candidate (no prices: those are the parent's)."""

    index: int
    refused: str | None = None
    vllm_serve: str | None = None
    kv_cache_tokens: int | None = None
    engine_kv_tokens: int | None = None
    """The KV pool of the whole engine (every data-parallel rank's), tokens."""
    max_concurrency: float | None = None
    capacity: Capacity | None = None
    fleet: FleetCapacity | None = None
    """Behind a router: the fewest replicas that held the peak (no per-replica capacity)."""
    calibration_notes: list[str] = []
    """What of the candidate its calibration did not measure (another GPU or model than the
    profile's: its constants transferred; batches, contexts or prompts beyond its runs')."""


_W: dict[str, Any] = {}


def init(workload: Workload, slo: Slo, n: int, fleet: FleetTraffic | None = None) -> None:
    _W.update(workload=workload, slo=slo, n=n, fleet=fleet)


def evaluate(index: int, cand: Candidate) -> Outcome:
    try:
        r = cand.engine.resolve()
        mem = plan_memory(r)
    except SimError as exc:
        return Outcome(index=index, refused=exc.message)
    serve = " ".join(cand.engine.launch_command())
    w: Workload = _W["workload"]
    out = Outcome(
        index=index,
        calibration_notes=use_warnings(r, w.mean_input, w.mean_output),
        vllm_serve=serve,
        kv_cache_tokens=mem.kv_cache_tokens,
        engine_kv_tokens=(mem.engine_blocks or mem.num_gpu_blocks) * r.block_size,
        max_concurrency=mem.max_concurrency,
    )
    traffic: FleetTraffic | None = _W["fleet"]
    if cand.router is not None and traffic is not None:
        policy = cand.router
        last: list[float | None] = [None]
        """The session lifetime the search's last simulation measured: its next one's guess
        (one candidate's search runs in one process, in order)."""

        def run(k: int) -> Point:
            p = fleet_point(
                r,
                mem,
                _W["workload"],
                traffic,
                traffic.peak_rate,
                _W["n"],
                k,
                policy,
                life_guess_s=last[0],
            )
            last[0] = p.session_lifetime_s
            return p

        out.fleet = find_replicas(run, _W["slo"], traffic.max_replicas, policy, traffic.replicas)
    else:
        out.capacity = find_capacity(r, mem, _W["workload"], _W["slo"], _W["n"])
    return out


def draw(cand: Candidate, rate: float, draw: int) -> Point:
    """One independent draw of the traffic at ``rate`` on one replica of ``cand``."""
    r = cand.engine.resolve()
    return simulate_draw(r, plan_memory(r), _W["workload"], rate, _W["n"], draw)


def draw_fleet(
    cand: Candidate, replicas: int, draw: int, life_guess_s: float | None = None
) -> Point:
    """One independent draw of the traffic at the peak on ``replicas`` of ``cand`` behind
    its router (``life_guess_s``: the session lifetime the search measured)."""
    traffic: FleetTraffic = _W["fleet"]
    assert cand.router is not None and traffic is not None
    r = cand.engine.resolve()
    return fleet_point(
        r,
        plan_memory(r),
        _W["workload"],
        traffic,
        traffic.peak_rate,
        _W["n"],
        replicas,
        cand.router,
        draw,
        life_guess_s,
    )
