"""Where a command writes its results: ``--result-dir``, by default a new folder
``servetune-results/<YYYYmmdd-HHMMSS>-<command>`` under the current directory."""

from __future__ import annotations

import argparse
from datetime import datetime
from pathlib import Path

RESULTS_ROOT = Path("servetune-results")


def default_result_dir(kind: str) -> Path:
    return RESULTS_ROOT / f"{datetime.now():%Y%m%d-%H%M%S}-{kind}"


def add_result_dir_argument(
    g: argparse.ArgumentParser | argparse._ArgumentGroup, kind: str, what: str = "run"
) -> None:
    g.add_argument(
        "--result-dir",
        type=Path,
        default=None,
        help=f"{what} directory (default: {RESULTS_ROOT}/<time>-{kind})",
    )


def result_dir(args: argparse.Namespace, kind: str) -> Path:
    """``--result-dir`` when given, else a new default folder for ``kind``."""
    given: Path | None = args.result_dir
    return given if given is not None else default_result_dir(kind)
