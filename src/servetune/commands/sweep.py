"""``servetune sweep``: bench at rising load levels → the throughput–latency curve, the knee,
the SLO-max rate, and a report."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servetune.commands._engine_args import add_engine_arguments
from servetune.commands._result_dir import add_result_dir_argument, result_dir
from servetune.commands._url_args import http_url
from servetune.commands._workload_args import (
    add_target_arguments,
    add_workload_arguments,
    num_prompts_given,
    workload_config_from_args,
)

if TYPE_CHECKING:
    from servetune.results.sweep_schema import SweepConfig, SweepResult, TargetKind
    from servetune.sweep.runner import LevelRunner, ServerControl

DEFAULT_RATES = "8,16,32,64,128"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_target_arguments(p)
    add_workload_arguments(p)
    g = p.add_argument_group("sweep")
    levels = g.add_mutually_exclusive_group()
    levels.add_argument(
        "--request-rates",
        default=None,
        metavar="R1,R2,…|auto",
        help=f"offered req/s per level (default {DEFAULT_RATES}, the seed's); 'auto' probes the "
        "saturation throughput with one unbounded-rate level, then places levels from ~10%% to "
        "~120%% of it, denser near saturation",
    )
    levels.add_argument(
        "--concurrencies",
        default=None,
        metavar="C1,C2,…",
        help="sweep the concurrency cap instead (closed loop), e.g. 1,2,4,8,16,32,64",
    )
    g.add_argument(
        "--auto-levels", type=int, default=8, help="levels placed by --request-rates auto"
    )
    g.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="runs per level with different seeds; their spread goes into the knee's confidence",
    )
    g.add_argument(
        "--resume",
        action="store_true",
        help="continue the sweep in --result-dir: keep finished levels, re-run the rest",
    )
    g.add_argument(
        "--confirm",
        action="store_true",
        help="with --goodput: run one more level at the interpolated SLO-max rate to check it",
    )
    g.add_argument(
        "--knee-k",
        type=float,
        default=2.0,
        help="knee: where d ln P99 / d ln throughput reaches k (default 2: an M/M/1 queue at "
        "2/3 load; 1 = Kleinrock's power, half load — more cautious)",
    )
    g.add_argument(
        "--sim-offline",
        action="store_true",
        help="no --base-url: simulate every level on the virtual clock (seconds, not minutes)",
    )
    g.add_argument(
        "--server-cmd",
        default=None,
        help="command line that starts the server at --base-url (stopped at the end, by its "
        "process group)",
    )
    g.add_argument(
        "--restart-per-level",
        action="store_true",
        help="restart the server (--server-cmd, or the embedded engine) before every level",
    )
    g.add_argument(
        "--server-ready-timeout",
        type=float,
        default=600.0,
        help="seconds to wait for --server-cmd to answer /v1/models",
    )
    g.add_argument(
        "--level-runner",
        default=None,
        metavar="MODULE:CALLABLE",
        help="run each level with your own callable(cfg, level_dir) -> RunResult "
        "(e.g. servetune.sweep.synthetic:run_level, a closed-form model for trying things)",
    )
    o = p.add_argument_group("output")
    add_result_dir_argument(o, "sweep", "sweep")
    o.add_argument("--no-report", action="store_true", help="do not write report.html and PNGs")
    o.add_argument("--no-progress", action="store_true", help="no live progress line")
    o.add_argument("--no-metrics", action="store_true", help="do not scrape the server's /metrics")
    o.add_argument("--metrics-interval", type=float, default=1.0, help="seconds between scrapes")
    o.add_argument(
        "--dcgm-url", type=http_url, default=None, help="DCGM exporter /metrics URL for GPU use"
    )
    add_engine_arguments(
        p.add_argument_group("simulated engine (when no --base-url)"),
        shared=("model", "served_model_name"),
    )


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def sweep_config_from_args(args: argparse.Namespace) -> SweepConfig:
    """The SweepConfig the flags describe (validated: user errors are ConfigErrors)."""
    from servetune.errors import ConfigError
    from servetune.results.sweep_schema import SweepConfig
    from servetune.sweep.levels import parse_concurrencies, parse_rates

    bench = workload_config_from_args(args)
    engine: dict[str, Any] | None = None
    if args.sim_offline and bench.base_url is not None:
        raise ConfigError(
            "--sim-offline simulates the engine itself: --base-url does not apply",
            hint="drop --base-url, or drop --sim-offline to sweep the real server",
        )
    if args.sim_offline and args.level_runner:
        raise ConfigError("--sim-offline and --level-runner each choose how levels run: pick one")
    target: TargetKind
    if args.level_runner:
        target = "custom"
    elif args.sim_offline:
        target = "offline"
    elif bench.base_url is None:
        target = "embedded"
    else:
        target = "url"
    if target == "url":
        from servetune.commands._engine_args import refuse_engine_flags_with_base_url

        refuse_engine_flags_with_base_url(args)
    if target in ("offline", "embedded"):
        from servetune.commands._engine_args import engine_config_from_args

        engine = engine_config_from_args(args).model_dump(mode="json")
        bench = bench.model_copy(update={"model": None})
    if args.server_cmd and bench.base_url is None:
        raise ConfigError(
            "--server-cmd needs --base-url (where the started server will answer)",
            hint="e.g. --server-cmd 'vllm serve MODEL --port 8000' "
            "--base-url http://127.0.0.1:8000/v1",
        )
    if args.restart_per_level and target == "url" and not args.server_cmd:
        raise ConfigError(
            "--restart-per-level needs --server-cmd (servetune can only restart what it started)"
        )
    if args.repeats < 1:
        raise ConfigError(
            f"--repeats must be ≥ 1 (got {args.repeats})",
            hint="e.g. --repeats 3 (one run per level is --repeats 1)",
        )
    if args.auto_levels < 2:
        raise ConfigError(
            f"--auto-levels must be ≥ 2 (got {args.auto_levels})", hint="e.g. --auto-levels 8"
        )
    if not args.knee_k > 0:
        raise ConfigError(f"--knee-k must be > 0 (got {args.knee_k})", hint="e.g. --knee-k 1")
    if not 0 < args.server_ready_timeout < math.inf:  # 0 or NaN: no server is ever "ready"
        raise ConfigError(
            f"--server-ready-timeout must be > 0 seconds (got {args.server_ready_timeout:g})",
            hint="e.g. --server-ready-timeout 600",
        )
    if args.confirm and bench.goodput.is_empty():
        raise ConfigError(
            "--confirm checks the SLO-max rate, which needs SLOs",
            hint="add e.g. --goodput ttft:500 tpot:50",
        )
    levels: dict[str, Any] = (
        {"mode": "concurrency", "concurrencies": parse_concurrencies(args.concurrencies)}
        if args.concurrencies is not None
        else {
            "mode": "rate",
            "request_rates": parse_rates(
                DEFAULT_RATES if args.request_rates is None else args.request_rates
            ),
            "auto_levels": args.auto_levels,
        }
    )
    return SweepConfig(
        bench=bench,
        **levels,
        repeats=args.repeats,
        target=target,
        engine=engine,
        server_cmd=args.server_cmd,
        restart_per_level=args.restart_per_level,
        scrape_metrics=not args.no_metrics,
        knee_k=args.knee_k,
        confirm=args.confirm,
    )


def _runner(args: argparse.Namespace, cfg: SweepConfig) -> tuple[LevelRunner, ServerControl | None]:
    from servetune.sweep import targets

    if cfg.target == "custom":
        return targets.load_runner(args.level_runner), _server_cmd(args, cfg)
    if cfg.target == "offline":
        from servetune.sim.config import EngineConfig

        engine = EngineConfig.model_validate(cfg.engine)
        return targets.offline_runner(engine, progress=not args.no_progress), None
    common: dict[str, Any] = {
        "progress": not args.no_progress,
        "scrape_metrics": cfg.scrape_metrics,
        "metrics_interval_s": args.metrics_interval,
        "dcgm_url": args.dcgm_url,
        "num_prompts_given": num_prompts_given(args),
    }
    if cfg.target == "embedded":
        from servetune.sim.config import EngineConfig

        embedded = targets.EmbeddedEngine(EngineConfig.model_validate(cfg.engine))
        return targets.bench_runner(base_url=embedded.url, **common), embedded
    return targets.bench_runner(**common), _server_cmd(args, cfg)


def _server_cmd(args: argparse.Namespace, cfg: SweepConfig) -> ServerControl | None:
    if not cfg.server_cmd or cfg.bench.base_url is None:
        return None
    from servetune.sweep.server import ServerProcess

    return ServerProcess(
        cfg.server_cmd,
        cfg.bench.base_url,
        ready_timeout_s=args.server_ready_timeout,
        echo=_say,
    )


def print_sweep(result: SweepResult) -> None:
    """The curve as a table, then the knee and the SLO-max in a sentence each."""
    from servetune.sweep import fmt

    mode = result.config.mode
    head = "offered" if mode == "rate" else "conc"
    if mode == "rate" and fmt.rate_unit(result.config.bench) == "sessions/s":
        head = "sess/s"  # a session-rate ladder: each level starts that many sessions a second
    print(
        f"{'level':<22} {head:>8} {'req/s':>8} {'tok/s':>9} {'P99 TTFT':>10} "
        f"{'P99 TPOT':>9} {'P99 E2E':>9} {'KV':>5} {'wait':>6} {'failed':>7}"
    )
    for r in result.measured_rows():
        load = r.load
        kv = r.server.kv_cache_usage_mean if r.server else None
        wait = r.server.waiting_mean if r.server else None
        print(
            f"{r.label:<22} {('inf' if math.isinf(load) else fmt.num(load)):>8} "
            f"{fmt.num(r.request_throughput):>8} {fmt.num(r.output_throughput):>9} "
            f"{fmt.ms(r.ttft_p99):>10} {fmt.ms(r.tpot_p99):>9} {fmt.ms(r.e2el_p99):>9} "
            f"{(f'{kv:.0%}' if kv is not None else '–'):>5} "
            f"{(fmt.num(wait, 2) if wait is not None else '–'):>6} "
            f"{(f'{r.failure_share:.0%}' if r.failure_share is not None else '–'):>7}"
            + ("" if r.status == "complete" else f"  {r.status}")
        )
    if result.knee is not None:
        print(f"\nknee: {result.knee.verdict}")
    if result.slo_max is not None:
        print(f"SLO: {result.slo_max.verdict}")
    for w in result.warnings:
        print(f"warning: {w}")
    if result.status != "complete":
        print(f"sweep {result.status}")


def _recorded_seed(sweep_dir: Path) -> int | None:
    """The seed of the sweep being resumed (drawn at its start when none was given)."""
    from servetune.errors import ResultError
    from servetune.results.sweep_schema import read_sweep_result

    try:
        return read_sweep_result(sweep_dir).config.bench.seed
    except ResultError:
        return None


def run(args: argparse.Namespace) -> int:
    from servetune.errors import ConfigError
    from servetune.sweep.runner import run_sweep

    if args.resume and args.result_dir is None:
        raise ConfigError(
            "--resume needs --result-dir (the sweep to continue)",
            hint="e.g. servetune sweep ... --resume --result-dir servetune-results/<time>-sweep",
        )
    if args.resume and args.seed is None:
        args.seed = _recorded_seed(Path(args.result_dir))
    cfg = sweep_config_from_args(args)
    out = result_dir(args, "sweep")
    runner, server = _runner(args, cfg)
    if cfg.target == "embedded":
        engine = cfg.engine or {}
        _say(
            f"no --base-url: sweeping the simulated engine ({engine.get('model')} on "
            f"{engine.get('gpu')}) in real time"
        )
    result = run_sweep(
        cfg, out, runner, resume=args.resume, server=server, command=list(sys.argv), echo=_say
    )
    print_sweep(result)
    if not args.no_report:
        from servetune.report.build import build_report

        written = build_report(out)
        print(f"report: {written.html}")
    print(f"results: {out}")
    from servetune.commands.bench import exit_code

    return exit_code(result.status)
