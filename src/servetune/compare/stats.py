"""A run's block bootstrap, shared by the comparisons.

:func:`replicate` resamples one run in time blocks (:mod:`.bootstrap`) — the within-run spread
of a figure, used for a sweep's own knee and SLO-max. (The family bound of a comparison of two
runs is :func:`.signflip.family_bound`.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from servetune.compare.bootstrap import (
    block_length,
    figure_values,
    multiplicities,
    point_estimates,
)
from servetune.compare.figures import FigureDef
from servetune.compare.windows import WindowedRun

DEFAULT_REPLICATES = 2000
DEFAULT_LEVEL = 0.95


@dataclass
class RunReplicates:
    """One run's point estimates and bootstrap errors (θ* − median θ*) per figure."""

    estimates: dict[str, float]
    errors: dict[str, np.ndarray]
    block: int
    windows: int
    width_s: float


def replicate(
    run: WindowedRun, figs: list[FigureDef], reps: int = DEFAULT_REPLICATES, seed: int = 0
) -> RunReplicates:
    est = point_estimates(run, figs)
    block = block_length(run, figs, est)
    rng = np.random.default_rng(seed)
    mult = multiplicities(run.n, block, reps, rng)
    vals = figure_values(run, figs, mult, exact=False)
    errors: dict[str, np.ndarray] = {}
    for key, v in vals.items():
        finite = v[np.isfinite(v)]
        center = float(np.median(finite)) if finite.size else math.nan
        errors[key] = v - center
    return RunReplicates(est, errors, block, run.n, run.width_s)
