"""Statistics shared by the comparisons: a run's block bootstrap and the max-T family bound.

:func:`replicate` resamples one run in time blocks (:mod:`.bootstrap`) — the within-run spread
of a figure, used for a sweep's own knee and SLO-max. :func:`max_t_critical` turns no-change
replicates of several figures into half-widths that hold for all of them at once
(Westfall–Young single-step max-T), so "significant" anywhere in a family of figures is a 5%
false alarm when nothing changed, however many figures and however correlated.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
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


def max_t_critical(
    draws: Mapping[str, np.ndarray], level: float = DEFAULT_LEVEL
) -> tuple[dict[str, float], float]:
    """Westfall–Young single-step max-T over a family of figures whose no-change draws are
    symmetric about 0: each figure's draws are scaled by their standard deviation s_f, and c
    is the ``level`` quantile (the next draw up, never interpolated) of max_f |D*_f| / s_f.
    Returns each figure's half-width c·s_f (differences beyond it are significant, all at once
    with a ``level`` chance of no false alarm) and c."""
    keys = [k for k, d in draws.items() if np.isfinite(d).sum() >= 2]
    if not keys:
        return {}, math.nan
    scales = {}
    for k in keys:
        d = draws[k][np.isfinite(draws[k])]
        s = float(np.sqrt(np.mean(d * d)))
        scales[k] = s
    live = [k for k in keys if scales[k] > 0]
    if not live:
        return {k: 0.0 for k in keys}, math.nan
    mat = np.vstack([np.abs(np.nan_to_num(draws[k], nan=0.0)) / scales[k] for k in live])
    m = mat.max(axis=0)
    c = float(np.quantile(m, level, method="higher"))
    out = {k: c * scales[k] for k in live}
    out.update({k: 0.0 for k in keys if k not in out})
    return out, c
