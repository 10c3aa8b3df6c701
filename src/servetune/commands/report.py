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
    from pathlib import Path

    from servetune.report.build import build_report
    from servetune.results.io import RUN_FILE
    from servetune.results.plan_file import PLAN_FILE
    from servetune.results.watch_file import WATCH_FILE

    where = Path(args.path).expanduser()
    if (where / PLAN_FILE).is_file() or where.name == PLAN_FILE:
        from servetune.report.plan_page import build_plan_report

        print(f"report: {build_plan_report(where, args.out)} (a servetune plan)")
        return 0
    if (where / WATCH_FILE).is_file() and not (where / RUN_FILE).is_file():
        from servetune.report.recording import build_recording_report

        html = build_recording_report(where, args.out, png=not args.no_png)
        print(f"report: {html} (a servetune watch recording)")
        return 0
    written = build_report(args.path, args.out, png=not args.no_png)
    data = written.data
    if data is not None and data.sweep is not None and data.sweep.knee is not None:
        print(data.sweep.knee.verdict)
    print(f"report: {written.html}")
    print(f"table:  {written.csv}")
    if written.pngs:
        print(f"plots:  {', '.join(p.name for p in written.pngs)}")
    return 0
