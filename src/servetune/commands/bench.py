"""``servetune bench``: one load test at a fixed request rate or concurrency."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

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
    from servetune.results.schema import BenchConfig, RunResult


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_target_arguments(p)
    add_workload_arguments(p)
    g = p.add_argument_group("output")
    add_result_dir_argument(g, "bench")
    g.add_argument("--overwrite", action="store_true", help="replace a run already in --result-dir")
    g.add_argument("--no-progress", action="store_true", help="no live progress line")
    g.add_argument("--no-metrics", action="store_true", help="do not scrape the server's /metrics")
    g.add_argument(
        "--metrics-interval",
        type=float,
        default=1.0,
        help="seconds between /metrics scrapes (0.5–1 recommended)",
    )
    g.add_argument(
        "--dcgm-url", type=http_url, default=None, help="DCGM exporter /metrics URL for GPU use"
    )
    add_engine_arguments(
        p.add_argument_group("simulated engine (when no --base-url)"),
        shared=("model", "served_model_name"),
    )


def run(args: argparse.Namespace) -> int:
    from servetune.commands._engine_args import refuse_engine_flags_with_base_url
    from servetune.commands.summary_print import print_summary
    from servetune.workload.plan import validate_config

    cfg = workload_config_from_args(args)
    refuse_engine_flags_with_base_url(args)
    validate_config(cfg)  # before the server is probed: a bad flag is said first, at once
    out = result_dir(args, "bench")

    def say(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    if cfg.base_url is None:
        from servetune.commands._engine_args import engine_config_from_args
        from servetune.sim.embedded import start_embedded

        engine = engine_config_from_args(args)
        server = start_embedded(engine)
        say(
            f"no --base-url: started the simulated engine ({engine.model} on {engine.gpu}) "
            f"at {server.base_url}"
        )
        cfg = cfg.model_copy(update={"base_url": server.base_url, "model": None})
        try:
            result = _bench(cfg, out, args, say)
        finally:
            server.stop()
    else:
        result = _bench(cfg, out, args, say)
    print_summary(result)
    print(f"results: {out}")
    return exit_code(result.status)


EXIT_CODES = {"complete": 0, "degraded": 1, "failed": 1, "interrupted": 130}
"""0: complete; 1: more requests failed than --max-failure-rate allows (degraded or failed);
130: interrupted (Ctrl-C); 2 (from the CLI): bad input, nothing run."""


def exit_code(status: str) -> int:
    return EXIT_CODES.get(status, 1)


def _bench(
    cfg: BenchConfig, out: Path, args: argparse.Namespace, say: Callable[[str], None]
) -> RunResult:
    from servetune.loadgen.bench import bench

    return bench(
        cfg,
        out,
        progress=not args.no_progress,
        scrape_metrics=not args.no_metrics,
        metrics_interval_s=args.metrics_interval,
        dcgm_url=args.dcgm_url,
        overwrite=args.overwrite,
        num_prompts_given=num_prompts_given(args),
        notify=say,
    )
