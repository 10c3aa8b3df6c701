"""``servetune compare A B [C …]``: did the change help? Every figure of B against A's with
a 95% interval from the runs' own time structure, and whether the difference is real."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "results",
        nargs="+",
        metavar="RESULT_DIR",
        help="runs or sweeps: the first is the baseline A, each other one is compared with it",
    )
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.add_argument("--html", type=Path, default=None, metavar="FILE", help="write an HTML page")
    p.add_argument(
        "--force",
        action="store_true",
        help="compare even when the workloads differ (each difference is printed as a warning)",
    )
    p.add_argument(
        "--goodput",
        nargs="+",
        default=None,
        metavar="KEY:MS",
        help="SLOs for goodput and the SLO-max rate, e.g. ttft:500 tpot:50 (default: A's)",
    )
    p.add_argument(
        "--replicates",
        type=int,
        default=None,
        help="sign patterns drawn for the intervals (default 4000)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the random sign patterns")
    p.add_argument("--brief", action="store_true", help="headline figures only (terminal output)")


def run(args: argparse.Namespace) -> int:
    from servetune.commands._workload_args import parse_goodput
    from servetune.compare.build import build, comparable
    from servetune.compare.render import render_pair, render_sweep
    from servetune.errors import ConfigError

    if args.replicates is not None and args.replicates < 100:
        raise ConfigError(
            f"--replicates {args.replicates}: too few for a 95% interval", hint="use ≥ 1000"
        )
    if args.seed < 0:  # was numpy's "expected non-negative integer" traceback
        raise ConfigError(f"--seed must be ≥ 0 (got {args.seed})", hint="e.g. --seed 0")
    slo = parse_goodput(args.goodput) if args.goodput else None
    quiet = args.json or len(args.results) <= 2
    say = None if quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
    report = build(
        args.results,
        slo,
        force=args.force,
        replicates=args.replicates,
        seed=args.seed,
        progress=say,
    )
    if args.html is not None:
        from servetune.compare.html import write_html

        write_html(args.html, report)
    if args.json:
        print(report.model_dump_json(indent=2))
    else:
        texts = [render_pair(p, detail=not args.brief) for p in report.pairs]
        texts += [render_sweep(s) for s in report.sweeps]
        print("\n\n".join(texts))
        if args.html is not None:
            print(f"\nHTML: {args.html}")
    if not comparable(report):
        print(
            "servetune compare: the results are not comparable (see above); --force compares "
            "them anyway",
            file=sys.stderr,
        )
        return 2
    return 0
