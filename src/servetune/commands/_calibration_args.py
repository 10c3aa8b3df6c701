"""``--calibration PROFILE`` for the planning commands (``plan``, ``tune``, ``cost``): the
flag, and reading it once into the calibration the simulated engine applies plus the record a
result keeps of it. ``sim run``/``serve``/``bench``/``sweep`` take it with the engine's flags
(:mod:`servetune.commands._engine_args`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from servetune.results.calibration_file import Calibration
    from servetune.results.calibration_ref import CalibrationRef


def add_calibration_argument(p: argparse._ActionsContainer, what: str) -> None:
    p.add_argument(
        "--calibration",
        default=None,
        metavar="PROFILE",
        help="simulate with the constants `servetune sim calibrate` fitted to a deployment's "
        f"own runs (its calibration.json); {what}",
    )


def read_profile(path: str | Path) -> tuple[Calibration, CalibrationRef]:
    """The calibration at ``path`` (a file, or a directory holding calibration.json) and its
    record; a missing or damaged profile is a ResultError naming --calibration."""
    from servetune.errors import ResultError
    from servetune.results.calibration_file import read_calibration
    from servetune.results.calibration_ref import CalibrationRef

    try:
        cal = read_calibration(path).calibration
    except ResultError as exc:
        raise ResultError(
            f"--calibration {path}: {exc.message}",
            hint="give the calibration.json `servetune sim calibrate RUN... --out PROFILE` "
            "wrote (or its directory)",
        ) from None
    dep = cal.deployment
    ref = CalibrationRef(
        id=cal.id,
        file=str(Path(path).resolve()),
        device=dep.device.name,
        model=dep.model,
        engine=dep.engine,
        constants=dict(cal.constants),
    )
    return cal, ref


def calibration_of(args: argparse.Namespace) -> tuple[Calibration, CalibrationRef] | None:
    """``--calibration``'s profile, or None when it was not given."""
    path = getattr(args, "calibration", None)
    return read_profile(path) if path else None
