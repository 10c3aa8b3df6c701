"""``servetune report RUN_OR_SWEEP_DIR``: one self-contained HTML file, PNGs and a CSV."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "path",
        type=Path,
        metavar="RUN_OR_SWEEP_DIR",
        help="a run directory (run.json) or a sweep directory (sweep.json)",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="where to write report.html, the PNGs and levels.csv (default: the directory itself)",
    )
    p.add_argument("--no-png", action="store_true", help="only the HTML and the CSV")


def run(args: argparse.Namespace) -> int:
    from servetune.report.build import build_report

    written = build_report(args.path, args.out, png=not args.no_png)
    data = written.data
    if data is not None and data.sweep is not None and data.sweep.knee is not None:
        print(data.sweep.knee.verdict)
    print(f"report: {written.html}")
    print(f"table:  {written.csv}")
    if written.pngs:
        print(f"plots:  {', '.join(p.name for p in written.pngs)}")
    return 0
