"""How often the SLO-max rates a plan's table shows miss the SLO on fresh draws of the traffic.

Usage::

    .venv/bin/python benchmarks/plan_fresh_draws.py PLAN.json [PLAN.json …] [--draws 20]
        [--rows 12]

For each ``plan.json`` (written by ``servetune plan``, any version: the traffic, the candidates
and the SLOs are rebuilt from the command it records), each of the first ``--rows`` rows that
hold the traffic is simulated at the SLO-max rate per replica the table shows, on ``--draws``
fresh draws of the traffic — other arrivals and another request order than the search's draw
(0) and the confirmation's (1–8): draws 1001, 1002, … — with the plan's request count. A draw
*misses* when the P99 of a latency in the SLO exceeds it (the in-flight growth of one draw is
too noisy to count alone; the confirmation pools it over its draws). Printed per row, then per
plan split into rows shown as confirmed ("8 draws") and rows shown on the search's one draw
("1 draw"): fresh draws missed ÷ run. One process, simulations cached by (row, rate) across
the files (a row shown at the same figure in two plans is simulated once).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from servetune.cli import build_parser
from servetune.commands.plan import _request
from servetune.plan.capacity import latency_margin, simulate_draw
from servetune.plan.space import Candidate
from servetune.plan.workload import Workload
from servetune.results.plan_file import read_plan_result
from servetune.results.schema import Slo
from servetune.sim.memory import plan_memory

FIRST_DRAW = 1001
_cache: dict[tuple[str, str, float, int], tuple[int, int]] = {}


def fresh_misses(
    cand: Candidate, w: Workload, slo: Slo, rate: float, n: int, draws: int, key: str
) -> tuple[int, int]:
    """(missed, run) over ``draws`` fresh draws at ``rate``."""
    k = (key, cand.label, round(rate, 9), draws)
    if k not in _cache:
        r = cand.engine.resolve()
        mem = plan_memory(r)
        missed = 0
        for d in range(FIRST_DRAW, FIRST_DRAW + draws):
            p = simulate_draw(r, mem, w, rate, n, d)
            missed += latency_margin(p, slo) > 1.0
        _cache[k] = (missed, draws)
    return _cache[k]


def one(path: Path, draws: int, rows: int) -> dict[str, list[int]]:
    plan = read_plan_result(path)
    args = build_parser(only="plan").parse_args(plan.command[1:])
    req = _request(args)
    by_label = {c.label: c for c in req.candidates}
    key = " ".join(plan.command[1:])
    ok = [c for c in plan.candidates if c.status == "ok"][:rows]
    tally: dict[str, list[int]] = {"8 draws": [0, 0], "1 draw": [0, 0]}
    print(f"{path}: {plan.model}, peak {plan.peak_rate:g} req/s, {plan.workload}")
    for i, c in enumerate(ok, 1):
        assert c.slo_max_rate_per_replica is not None
        kind = "8 draws" if c.confirm_draws else "1 draw"
        missed, run = fresh_misses(
            by_label[c.label],
            req.workload,
            plan.slo,
            c.slo_max_rate_per_replica,
            plan.requests_per_point,
            draws,
            key,
        )
        tally[kind][0] += missed
        tally[kind][1] += run
        print(
            f"  {i:>2} {c.label:<48} {c.slo_max_rate_per_replica:7.3g} req/s  {kind:<7} "
            f"${c.usd_per_hour or 0:7.2f}/h  missed {missed:>2} of {run}"
        )
    for kind, (m, r) in tally.items():
        if r:
            print(f"  rows shown on {kind}: {m} of {r} fresh draws missed ({m / r:.1%})")
    return tally


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("plans", nargs="+", type=Path)
    ap.add_argument("--draws", type=int, default=20)
    ap.add_argument("--rows", type=int, default=12)
    args = ap.parse_args()
    t0 = time.perf_counter()
    load = os.getloadavg()[0]
    total: dict[str, list[int]] = {"8 draws": [0, 0], "1 draw": [0, 0]}
    for p in args.plans:
        for kind, (m, r) in one(p, args.draws, args.rows).items():
            total[kind][0] += m
            total[kind][1] += r
    every = [sum(v[0] for v in total.values()), sum(v[1] for v in total.values())]
    for kind, (m, r) in [*total.items(), ("every", every)]:
        if r:
            print(f"all plans, rows shown on {kind}: {m} of {r} fresh draws missed ({m / r:.1%})")
    print(
        f"{time.perf_counter() - t0:.0f} s; load average {load:.2f} at the start, "
        f"{os.getloadavg()[0]:.2f} at the end"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
