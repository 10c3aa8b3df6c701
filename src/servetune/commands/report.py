"""``servetune report RESULT_DIR``: one self-contained HTML file, PNGs and a CSV."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "path",
        type=Path,
        metavar="RESULT_DIR",
        help="a run (run.json), a sweep (sweep.json), a tune result (tune.json), a plan "
        "(plan.json) or a watch recording (watch.json)",
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
    from servetune.results.io import RUN_FILE, SWEEP_FILE
    from servetune.results.plan_file import PLAN_FILE
    from servetune.results.tune_file import TUNE_FILE
    from servetune.results.watch_file import WATCH_FILE

    where = Path(args.path).expanduser()
    if (where / PLAN_FILE).is_file() or where.name == PLAN_FILE:
        from servetune.report.plan_page import build_plan_report

        print(f"report: {build_plan_report(where, args.out)} (a servetune plan)")
        return 0
    if (where / TUNE_FILE).is_file() or where.name == TUNE_FILE:
        from servetune.report.tune_page import build_tune_report

        html = build_tune_report(where, args.out, png=not args.no_png)
        print(f"report: {html} (a servetune tune result)")
        return 0
    if (where / WATCH_FILE).is_file() and not (where / RUN_FILE).is_file():
        from servetune.report.recording import build_recording_report

        html = build_recording_report(where, args.out, png=not args.no_png)
        print(f"report: {html} (a servetune watch recording)")
        return 0
    if where.is_dir() and not any(
        (where / name).is_file() for name in (RUN_FILE, SWEEP_FILE, WATCH_FILE)
    ):
        from servetune.errors import ResultError

        raise ResultError(
            f"{where} holds no servetune result: expected {RUN_FILE} (a run), {SWEEP_FILE} (a "
            f"sweep), {TUNE_FILE} (tune), {PLAN_FILE} (plan) or {WATCH_FILE} (a watch recording)",
            hint="point at the --result-dir of a bench, sweep, sim run, tune or watch --record",
        )
    written = build_report(args.path, args.out, png=not args.no_png)
    data = written.data
    if data is not None and data.sweep is not None and data.sweep.knee is not None:
        print(data.sweep.knee.verdict)
    print(f"report: {written.html}")
    print(f"table:  {written.csv}")
    if written.pngs:
        print(f"plots:  {', '.join(p.name for p in written.pngs)}")
    return 0
