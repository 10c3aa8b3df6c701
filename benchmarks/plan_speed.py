"""How long `servetune plan` takes over its default candidate space (target: ≥ 100 candidate
deployments in under 60 s on 2 cores).

Usage::

    .venv/bin/python benchmarks/plan_speed.py [--workers 2] [--requests-per-point 1000]
        [--serial]

Plans the seed's model (Qwen2.5-7B-Instruct) for a peak of 40 req/s, average 25 (random 1024
in / 128 out), SLOs P99 TTFT ≤ 1 s and P99 TPOT ≤ 60 ms, over the default space: 4 GPU types ×
TP 1, 2, 4 × quantization auto, fp8, awq × 4 knob sets (144; duplicates planned once). Prints
the candidates, the simulations, the wall seconds, candidates per second and the ratio to the
60-second target, with the load average (a shared machine's figure means little without it).
``--serial`` also runs it in one process, side by side, for the parallel speed-up.
``--moe`` also plans a mixture-of-experts scenario after it, side by side: DeepSeek-R1 (FP8)
at 4 req/s peak, random 2048 in / 1024 out, P99 TTFT ≤ 3 s and TPOT ≤ 80 ms, over H100,
H200, B200, MI300X and MI355X × the MoE layouts of 8 GPUs (tp8, tp8-ep, dp8-ep) × the default
knob set (15 candidates; H100's three refused), MI355X priced at --mi355x-price (the catalog
has no published offer for it).
``--fleet`` times (instead) the fleet example of docs/plan.md (Qwen2.5-7B on L4, 8 req/s of
8-turn sessions, ``plan --router round-robin,session,score --workers W``), through the CLI
in a subprocess; ``--before-src DIR`` runs the same command on another checkout's ``src``
(e.g. ``git archive COMMIT src | tar -x -C DIR``) beside it, prints both wall times and their
ratio, and checks that every row (replicas, search's draw, $/hour, limit, the figures at the
SLO, the draws) is the same in both plan.json files.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from servetune.cost.prices import PriceBook
from servetune.plan.request import PlanRequest
from servetune.plan.search import make_plan
from servetune.plan.space import (
    DEFAULT_GPUS,
    DEFAULT_KNOB_SETS,
    DEFAULT_QUANTIZATIONS,
    DEFAULT_TP,
    candidates,
)
from servetune.plan.workload import synthetic
from servetune.results.schema import Slo

TARGET_S = 60.0
MOE_GPUS = ("H100-SXM", "H200", "B200", "MI300X", "MI355X")


def moe(workers: int, n: int, mi355x_price: float) -> tuple[int, int, float, str]:
    model = "deepseek-ai/DeepSeek-R1"
    req = PlanRequest(
        model=model,
        peak_rate=4.0,
        slo=Slo(ttft=3000, tpot=80),
        candidates=candidates(model, list(MOE_GPUS), [8], ["auto"], ["default"]),
        workload=synthetic(2048, 1024, 0.0, max(4 * n, 4000), 0, 1.0),
        requests_per_point=n,
        workers=workers,
    )
    t0 = time.perf_counter()
    res = make_plan(req, PriceBook(overrides={"MI355X": mi355x_price}))
    wall = time.perf_counter() - t0
    win = res.winner.label if res.winner else "none"
    return len(res.candidates), res.simulations, wall, win


def one(workers: int, n: int) -> tuple[int, int, float, str]:
    req = PlanRequest(
        model="Qwen/Qwen2.5-7B-Instruct",
        peak_rate=40.0,
        average_rate=25.0,
        slo=Slo(ttft=1000, tpot=60),
        candidates=candidates(
            "Qwen/Qwen2.5-7B-Instruct",
            list(DEFAULT_GPUS),
            list(DEFAULT_TP),
            list(DEFAULT_QUANTIZATIONS),
            list(DEFAULT_KNOB_SETS),
        ),
        workload=synthetic(1024, 128, 0.0, max(4 * n, 4000), 0, 1.0),
        requests_per_point=n,
        workers=workers,
    )
    t0 = time.perf_counter()
    res = make_plan(req, PriceBook())
    wall = time.perf_counter() - t0
    win = res.winner.label if res.winner else "none"
    return len(res.candidates), res.simulations, wall, win


FLEET_ARGS = (
    "--peak-rate 8 --slo ttft:1000 tpot:100 --gpus L4 --tp 1 --quantizations auto "
    "--knob-set default --input-len 200 --output-len 150 --multiturn-turns 8 "
    "--multiturn-system-len 1024 --multiturn-system-prompts 8 --multiturn-think-time 5 "
    "--router round-robin,session,score --top 3"
).split()
ROW_KEYS = (
    "label", "replicas", "search_replicas", "usd_per_hour", "limiting_metric", "at_slo",
    "draws", "status",
)  # fmt: skip


def fleet(src: Path, workers: int) -> tuple[float, int, list[dict[str, Any]]]:
    """The docs/plan.md fleet example on the code under ``src``: wall s, simulations, rows."""
    out = Path(tempfile.mkdtemp(prefix="plan-speed-fleet-")) / "plan.json"
    env = {**os.environ, "PYTHONPATH": str(src)}
    cmd = [sys.executable, "-m", "servetune.cli", "plan", *FLEET_ARGS]
    cmd += ["--workers", str(workers), "-o", str(out)]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    d = json.loads(out.read_text())
    rows = [{k: c.get(k) for k in ROW_KEYS} for c in d["candidates"]]
    return wall, d["simulations"], rows


def run_fleet(workers: int, before: Path | None) -> None:
    here = Path(__file__).resolve().parents[1] / "src"
    sides = [("this checkout", here)] + ([("before", before)] if before is not None else [])
    got = {}
    for name, src in sides:
        load = os.getloadavg()[0]
        wall, sims, rows = fleet(src, workers)
        got[name] = (wall, rows)
        print(
            f"fleet example ({name}, {src}): {sims} simulations in {wall:.1f} s, workers="
            f"{workers}; rows: "
            + "; ".join(f"{r['label']} {r['search_replicas']}→{r['replicas']}" for r in rows)
            + f"; load average {load:.2f} at the start, {os.getloadavg()[0]:.2f} at the end"
        )
    if before is not None:
        (w_now, r_now), (w_b, r_b) = got["this checkout"], got["before"]
        same = json.dumps(r_now, sort_keys=True) == json.dumps(r_b, sort_keys=True)
        print(
            f"fleet example: {w_b:.1f} s before, {w_now:.1f} s now: {w_b / w_now:.2f}× faster; "
            f"rows {'identical' if same else 'DIFFERENT'}"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--requests-per-point", type=int, default=1000)
    ap.add_argument("--serial", action="store_true", help="also run in one process")
    ap.add_argument("--moe", action="store_true", help="also plan the MoE scenario")
    ap.add_argument("--mi355x-price", type=float, default=3.5, help="USD per MI355X-hour")
    ap.add_argument("--fleet", action="store_true", help="time the fleet example only")
    ap.add_argument("--before-src", type=Path, help="--fleet: also on this src/ beside it")
    args = ap.parse_args()
    if args.fleet:
        run_fleet(args.workers, args.before_src)
        return 0
    runs = [args.workers] + ([1] if args.serial and args.workers != 1 else [])
    walls = {}
    for w in runs:
        load = os.getloadavg()[0]
        n_c, sims, wall, win = one(w, args.requests_per_point)
        walls[w] = wall
        print(
            f"workers={w}: {n_c} candidates, {sims} simulations ({args.requests_per_point} "
            f"requests per point) in {wall:.1f} s = {n_c / wall:.2f} candidates/s; "
            f"{wall / TARGET_S:.2f}× the {TARGET_S:.0f} s target "
            f"({'met' if wall < TARGET_S and n_c >= 100 else 'MISSED'}); winner {win}; "
            f"load average {load:.2f} at the start, {os.getloadavg()[0]:.2f} at the end"
        )
    if len(walls) == 2:
        print(f"parallel speed-up: {walls[1] / walls[args.workers]:.2f}× with {args.workers}")
    if args.moe:
        load = os.getloadavg()[0]
        n_c, sims, wall, win = moe(args.workers, args.requests_per_point, args.mi355x_price)
        print(
            f"MoE (DeepSeek-R1, 5 GPU types x tp8/tp8-ep/dp8-ep), workers={args.workers}: "
            f"{n_c} candidates, {sims} simulations in {wall:.1f} s ({wall / TARGET_S:.2f}× the "
            f"{TARGET_S:.0f} s of the default space, beside it: {walls[args.workers]:.1f} s); "
            f"winner {win}; load average {load:.2f} at the start, {os.getloadavg()[0]:.2f} at "
            "the end"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
