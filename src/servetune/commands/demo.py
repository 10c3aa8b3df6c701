"""``servetune demo``: the seed's whole procedure on the embedded simulated engine.

Qwen2.5-7B-Instruct on one A100-80GB with the seed's baseline knobs (max-model-len 32768,
gpu-memory-utilization 0.90, max-num-seqs 256, max-num-batched-tokens 8192): the start-up
memory plan; a saturation probe; a rate sweep on the virtual clock (the seed's 8–128 req/s,
plus levels placed below the probed saturation so the knee is bracketed); one level again
on the real-time server, through the real HTTP client, beside its virtual-clock twin; the
knee and the comfortable concurrency; the diagnosis; the HTML report.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from servetune.commands._result_dir import add_result_dir_argument, result_dir

if TYPE_CHECKING:
    from servetune.results.schema import BenchConfig
    from servetune.results.sweep_schema import SweepResult
    from servetune.sim.config import EngineConfig

SEED_RATES = [8.0, 16.0, 32.0, 64.0, 128.0]
BRACKET = (0.25, 0.5, 0.7, 0.85, 0.95)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_result_dir_argument(p, "demo", "demo")
    p.add_argument(
        "--num-prompts",
        type=int,
        default=1000,
        help="prompts per virtual-clock level (the seed's 1000)",
    )
    p.add_argument(
        "--realtime-seconds",
        type=float,
        default=20.0,
        help="length of the real-time level (0 to skip it)",
    )


def _say(msg: str = "") -> None:
    print(msg, flush=True)


def _round_rate(x: float) -> float:
    return float(f"{x:.2g}") if x < 10 else float(round(x))


def run(args: argparse.Namespace) -> int:
    from servetune.errors import ConfigError
    from servetune.results.schema import BenchConfig
    from servetune.results.sweep_schema import SweepConfig
    from servetune.sim.config import EngineConfig
    from servetune.sim.memory import plan_memory
    from servetune.sim.offline import run_offline
    from servetune.sweep.runner import run_sweep
    from servetune.sweep.targets import offline_runner

    t_start = time.monotonic()
    out = result_dir(args, "demo")
    if not 0 <= args.realtime_seconds < math.inf:  # -1 and NaN skipped the level silently
        raise ConfigError(
            f"--realtime-seconds must be ≥ 0 (got {args.realtime_seconds:g})",
            hint="e.g. --realtime-seconds 20, or 0 to skip the real-time level",
        )
    earlier = [d for d in ("probe", "sweep", "realtime") if (out / d).exists()]
    if earlier:
        # a second demo into the same folder replaced the first one's probe, then stopped at
        # the sweep with a hint to pass --resume, which demo does not have
        raise ConfigError(
            f"{out} already holds a demo ({', '.join(earlier)})",
            hint="choose another --result-dir (or leave it out for a new folder)",
        )
    engine = EngineConfig(
        gpu="A100-80GB",
        model="Qwen/Qwen2.5-7B-Instruct",
        max_model_len=32768,
        gpu_memory_utilization=0.90,
        max_num_seqs=256,
        max_num_batched_tokens=8192,
    )
    bench = BenchConfig(
        dataset_name="random",
        random_input_len=1024,
        random_output_len=128,
        num_prompts=args.num_prompts,
        seed=0,
    )
    _say("== 1. Baseline configuration (the seed's), as vLLM would start it")
    mem = plan_memory(engine)
    for line in mem.log_lines():
        _say(f"   {line}")

    _say("\n== 2. Saturation probe: every request at once (request rate inf), virtual clock")
    probe = run_offline(bench, engine, out / "probe")
    sat = probe.summary.request_throughput
    _say(
        f"   the engine serves at most {sat:.1f} req/s "
        f"({probe.summary.output_throughput:.0f} output tok/s) of this workload"
    )
    extra = sorted({_round_rate(f * sat) for f in BRACKET} - set(SEED_RATES))
    rates = sorted(set(SEED_RATES) | set(extra))
    _say(
        f"   sweep levels: the seed's {', '.join(f'{r:g}' for r in SEED_RATES)} req/s"
        + (
            f", plus {', '.join(f'{r:g}' for r in extra)} to bracket the knee below {sat:.1f} req/s"
            if extra
            else ""
        )
    )

    _say(
        "\n== 3. Rate sweep, virtual clock (random 1024 in / 128 out, "
        f"{args.num_prompts} prompts a level)"
    )
    sweep_cfg = SweepConfig(
        bench=bench,
        mode="rate",
        request_rates=rates,
        target="offline",
        engine=engine.model_dump(mode="json"),
    )
    sweep = run_sweep(
        sweep_cfg,
        out / "sweep",
        offline_runner(engine),
        command=sys.argv,
        echo=lambda m: _say(f"   {m}"),
    )

    realtime_line = None
    if args.realtime_seconds > 0:
        realtime_line = _realtime_level(engine, bench, sweep, out, args.realtime_seconds)

    _say("\n== 5. The knee")
    knee = sweep.knee
    if knee is not None:
        _say(f"   {knee.verdict}")
    conc = _comfortable_concurrency(sweep)
    headline = _diagnosis(out / "sweep")

    _say("\n== 6. Report")
    from servetune.report.build import build_report

    report = build_report(out / "sweep")
    elapsed = time.monotonic() - t_start
    _say(f"   {report.html}")
    _say("\n" + "=" * 72)
    if knee is not None and knee.offered is not None:
        _say(
            f"knee: ≈{knee.throughput or 0:.2f} req/s served, {knee.offered:.2f} req/s offered"
            " — rate-limit there"
        )
    if conc is not None:
        _say(f"comfortable concurrency: ≈{conc:.0f} requests in flight")
    if realtime_line:
        _say(f"real-time check: {realtime_line}")
    if headline:
        _say(f"diagnosis: {headline}")
    _say(f"report: {report.html.resolve()}")
    _say(f"({elapsed:.0f} s)")
    return 0


def _comfortable_concurrency(sweep: SweepResult) -> float | None:
    knee = sweep.knee
    v = knee.concurrency if knee is not None else None
    return float(v) if v is not None and math.isfinite(v) else None


def _diagnosis(path: Path) -> str | None:
    from servetune.diagnose import diagnose_path

    return diagnose_path(path).headline or None


def _realtime_level(
    engine: EngineConfig, bench: BenchConfig, sweep: SweepResult, out: Path, seconds: float
) -> str:
    """One level again in real time: the embedded server, the real HTTP client."""
    from servetune.loadgen.bench import bench as run_bench
    from servetune.sim.embedded import start_embedded

    rows = [r for r in sweep.measured_rows() if math.isfinite(r.load)]
    knee_at = sweep.knee.offered if sweep.knee is not None else None
    below = [r for r in rows if knee_at is not None and r.load <= knee_at]
    twin = max(below, key=lambda r: r.load) if below else min(rows, key=lambda r: r.load)
    rate = twin.load
    n = max(20, int(rate * seconds))
    _say(
        f"\n== 4. One level in real time: {rate:g} req/s for ~{seconds:g} s through the HTTP "
        "client against the simulated server"
    )
    server = start_embedded(engine)
    try:
        cfg = bench.model_copy(
            update={"base_url": server.base_url, "request_rate": rate, "num_prompts": n}
        )
        live = run_bench(cfg, out / "realtime", progress=sys.stderr.isatty(), overwrite=True)
    finally:
        server.stop()
    s = live.summary
    # The virtual-clock twin of exactly these requests (same seed, count and arrivals): the
    # sweep's level ran more of them, and near the knee a longer run builds a longer queue.
    from servetune.sim.offline import run_offline

    same = bench.model_copy(
        update={"request_rate": rate, "num_prompts": n, "seed": live.config.seed}
    )
    v = run_offline(same, engine, out / "realtime-twin").summary
    _say(
        f"   real time:     {s.request_throughput:.2f} req/s, P50 TTFT {s.ttft.p50:.0f} ms, "
        f"P50 TPOT {s.tpot.p50:.1f} ms, client p99 send lag "
        f"{live.client_health.send_lag.p99:.2f} ms"
    )
    _say(
        f"   virtual clock: {v.request_throughput:.2f} req/s, P50 TTFT {v.ttft.p50:.0f} ms, "
        f"P50 TPOT {v.tpot.p50:.1f} ms (the same {n} requests)"
    )
    _say(
        f"   sweep level:   {twin.request_throughput:.2f} req/s, P50 TTFT {twin.ttft_p50:.0f} ms "
        f"({bench.num_prompts} requests: a longer run near the knee queues longer)"
    )
    return (
        f"{rate:g} req/s, the same {n} requests: P50 TTFT {s.ttft.p50:.0f} ms in real time vs "
        f"{v.ttft.p50:.0f} ms on the virtual clock"
    )
