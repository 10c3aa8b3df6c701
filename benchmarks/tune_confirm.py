"""Does the SLO-max that ``servetune tune`` reports hold on fresh draws of a longer run, and
what does the longer check (``tune/confirm.py``) cost?

Usage::

    nice -n 10 .venv/bin/python benchmarks/tune_confirm.py [--trials 12] [--draws 4]
        [--study-seeds 1] [--scenario NAME]

For each scenario (model × GPU × workload × SLOs, tight and loose) on the simulated engine:
``tune``'s study (TPE over one space, ``--repeats 3``, no one-knob table), then its finish
(repeats, the longer check). The best's reported figure is then measured on ``--draws``
fresh 4,000-request draws (seeds no part of the study uses) at that rate: printed, how many
of them miss the SLOs and by what, and the longer check's cost — its probes, their
engine-seconds (simulated: each probe's requests over its throughput) — and the finish's
wall time. The load average is printed beside the figures.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from servetune.metrics.slo_spec import parse_slos
from servetune.results.schema import BenchConfig
from servetune.results.tune_file import Dim, Space, TuneSpec
from servetune.tune.backends import SimBackend
from servetune.tune.confirm import CONFIRM_LENGTH
from servetune.tune.figures import value_of
from servetune.tune.finish import finish
from servetune.tune.run import run_tune

SPACE = Space(
    engine="sim",
    dims=[
        Dim(name="max_num_seqs", values=[8, 16, 32, 64, 128, 256, 512, 1024]),
        Dim(name="max_num_batched_tokens", values=[512, 1024, 2048, 4096, 8192, 16384]),
        Dim(name="kv_cache_dtype", values=["auto", "fp8"]),
        Dim(name="quantization", values=[None, "fp8"]),
    ],
)
FRESH_SEED = 70_001
"""The fresh draws' seeds: FRESH_SEED, FRESH_SEED + 1, … (the study's are 1 + r·1009)."""


@dataclass
class Scenario:
    name: str
    model: str
    gpu: str
    input_len: int
    output_len: int
    slos: list[str]


SCENARIOS = [
    Scenario(
        "tight 8B/H100",
        "meta-llama/Llama-3.1-8B-Instruct",
        "H100-SXM",
        512,
        512,
        ["ttft:p99<=200", "tpot:p99<=12"],
    ),
    Scenario(
        "tight 14B/L40S",
        "Qwen/Qwen2.5-14B-Instruct",
        "L40S",
        2048,
        256,
        ["ttft:p99<=1500", "tpot:p99<=40"],
    ),
    Scenario(
        "tight 32B/H100",
        "Qwen/Qwen2.5-32B-Instruct",
        "H100-SXM",
        1024,
        256,
        ["ttft:p99<=800", "tpot:p99<=30"],
    ),
    Scenario(
        "loose 8B/H100",
        "meta-llama/Llama-3.1-8B-Instruct",
        "H100-SXM",
        512,
        512,
        ["ttft:p99<=5000", "tpot:p99<=100"],
    ),
    Scenario(
        "loose 7B/A100",
        "Qwen/Qwen2.5-7B-Instruct",
        "A100-80GB",
        1024,
        128,
        ["ttft:p99<=1000", "tpot:p99<=50"],
    ),
]


def one(sc: Scenario, trials: int, draws: int, seed: int) -> dict[str, object]:
    slos = parse_slos(sc.slos)
    workload = BenchConfig(
        num_prompts=1000, random_input_len=sc.input_len, random_output_len=sc.output_len, seed=1
    )
    spec = TuneSpec(
        engine="sim",
        model=sc.model,
        gpu=sc.gpu,
        workload=workload,
        slos=slos,
        space=SPACE,
        trials=trials,
        repeats=3,
        ofat=False,
        seed=seed,
    )
    sim = SimBackend(sc.gpu, sc.model, workload, slos)
    with tempfile.TemporaryDirectory() as d:
        res = run_tune(spec, Path(d), echo=lambda _m: None, coordinate=False)
        t0 = time.monotonic()
        finish(res, sim, Path(d), echo=lambda _m: None)
        finish_s = time.monotonic() - t0
    assert res.best is not None
    figure = value_of(res, res.best) or 0.0
    n_long = workload.num_prompts * CONFIRM_LENGTH
    probes = [p for c in res.confirmations for p in c.probes]
    engine_s = sum(n_long / p.throughput for p in probes if p.throughput > 0)
    fresh = workload.model_copy(update={"num_prompts": n_long})
    ratios = []
    misses = 0
    for k in range(draws):
        wl = fresh.model_copy(update={"seed": FRESH_SEED + k, "request_rate": figure})
        p = SimBackend(sc.gpu, sc.model, wl, slos).measurer(res.best.config, slos)(figure)
        ratios.append(p.worst_ratio or 0.0)
        misses += not p.meets
    return {
        "figure": figure,
        "sat": res.best.saturation,
        "misses": misses,
        "ratios": ratios,
        "check_probes": len(probes),
        "engine_s": engine_s,
        "finish_s": finish_s,
        "verdict_tail": res.verdict.split(" On a run ")[-1] if " On a run " in res.verdict else "",
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=12)
    ap.add_argument("--draws", type=int, default=4)
    ap.add_argument("--study-seeds", type=int, default=1)
    ap.add_argument("--scenario", action="append", help="run only these (by name)")
    args = ap.parse_args()
    chosen = [s for s in SCENARIOS if not args.scenario or s.name in args.scenario]
    print(f"load average at start: {os.getloadavg()[0]:.2f} (cores: {os.cpu_count()})")
    total_miss = total_draws = 0
    total_engine = total_finish = 0.0
    for sc in chosen:
        for s in range(args.study_seeds):
            r = one(sc, args.trials, args.draws, seed=100 + s)
            ratios = r["ratios"]
            assert isinstance(ratios, list)
            total_miss += int(r["misses"])  # type: ignore[call-overload]
            total_draws += len(ratios)
            total_engine += float(r["engine_s"])  # type: ignore[arg-type]
            total_finish += float(r["finish_s"])  # type: ignore[arg-type]
            worst = ", ".join(f"{x:.3f}" for x in ratios)
            print(
                f"{sc.name:<16} seed {100 + s}: reported {r['figure']:.3g} req/s "
                f"(sat {r['sat']:.3g}); fresh draws' worst SLO/limit [{worst}] → "
                f"{r['misses']}/{len(ratios)} miss; check {r['check_probes']} probes, "
                f"{r['engine_s']:.0f} engine-s; finish {r['finish_s']:.1f} s wall "
                f"(median ratio {statistics.median(ratios):.3f})",
                flush=True,
            )
            print(f"    verdict: …{r['verdict_tail']}", flush=True)
    print(
        f"TOTAL: {total_miss}/{total_draws} fresh draws miss; check {total_engine:.0f} "
        f"engine-s; finish {total_finish:.0f} s wall; load average now "
        f"{os.getloadavg()[0]:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
