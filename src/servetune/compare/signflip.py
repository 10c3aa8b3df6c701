"""The noise of a difference between two runs: a sign-flip test on aligned time blocks.

Both runs are cut into the same number of time windows and the windows into ``K`` blocks of
``b`` consecutive windows. Each figure is computed on every block of each run, and block
``j`` of B is set against block ``j`` of A — the same stretch of the same workload's time
line (start-up ramp, steady part, a queue growing through an overloaded run, the drain after
the last arrival)::

    d_j = ln(θ_B,j / θ_A,j)        (θ > 0 in every block of both runs; else θ_B,j − θ_A,j)
    T   = mean_j d_j               (the typical change from A to B at the same moment)

If nothing changed, ``d_j`` and ``−d_j`` are equally likely, whatever the workload's time
structure: each replicate flips the sign of every ``d_j`` with probability ½ (all ``2^K``
patterns when there are few blocks) and T* = mean_j ±d_j is what T looks like by chance.
Blocks that are too short to be independent leave ``d_j`` correlated; the replicates are then
widened by the AR(1) variance factor √((1 + ρ) / (1 − ρ)), ρ the lag-1 autocorrelation of
``d_j`` (0 ≤ ρ ≤ 0.9) around its quadratic trend (a change that grows through the runs is
a change, not dependence) — or of ``d_j`` itself when both runs were past capacity, where a
chance difference in the queue carries on to the end of the run.

Why not a bootstrap of each run? A P99 rests on a run's few worst episodes (a burst of
arrivals, a queue build-up); resampling one run can only reshuffle its own episodes, never
draw a taller one, and on the simulated engine it put the run-to-run spread of P99 TPOT at
half its true size. Comparing the runs block by block sets each run's episodes against the
other's, and a difference that is real shows in (nearly) every block.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from servetune.compare.bootstrap import figure_values
from servetune.compare.figures import FigureDef
from servetune.compare.windows import WindowedRun

DEFAULT_REPLICATES = 4000
MIN_BLOCKS = 12
"""At least this many blocks (shorter blocks when the runs are short): with fewer, no
difference could reach 95% over a family of figures; the AR(1) factor pays for blocks shorter
than the correlation would ask."""
MAX_RHO = 0.9
Scale = Literal["log", "add"]


@dataclass
class BlockTest:
    """One figure: per-block differences, their mean T and T's no-change replicates."""

    scale: Scale
    d: np.ndarray
    """Per-block differences (NaN where a block lacks the figure in either run)."""
    t: float
    draws: np.ndarray
    rho: float
    blocks: int
    """Blocks that carry the figure in both runs."""


def block_matrix(n: int, block: int) -> np.ndarray:
    """(K × n) 0/1: window ``w`` belongs to block ``w // block``."""
    k = max(1, math.ceil(n / max(1, block)))
    m = np.zeros((k, n), dtype=np.int64)
    for j in range(k):
        m[j, j * block : min(n, (j + 1) * block)] = 1
    return m


def sign_patterns(k: int, reps: int, rng: np.random.Generator) -> np.ndarray:
    """(P × k) of ±1: every pattern when 2^k ≤ reps, else random ones plus the identity."""
    if k <= 0:
        return np.ones((1, 0))
    if 2**k <= reps:
        return np.array(list(itertools.product((1.0, -1.0), repeat=k)))
    draws = rng.integers(0, 2, size=(reps - 1, k)) * 2.0 - 1.0
    return np.vstack([np.ones((1, k)), draws])


def detrended(x: np.ndarray) -> np.ndarray:
    """``x`` minus its least-squares quadratic (a straight line below 6 points): a change that
    grows through the runs, or grows and then levels off, is a change, not dependence."""
    if x.size < 4:
        return x
    t = np.arange(x.size, dtype=float)
    coef = np.polyfit(t, x, 2 if x.size >= 6 else 1)
    out: np.ndarray = x - np.polyval(coef, t)
    return out


def lag1(x: np.ndarray) -> float:
    if x.size < 3:
        return 0.0
    xc = x - x.mean()
    den = float(np.dot(xc, xc))
    return float(np.dot(xc[:-1], xc[1:]) / den) if den > 0 else 0.0


def block_tests(
    a: WindowedRun,
    b: WindowedRun,
    figs: list[FigureDef],
    block: int,
    reps: int = DEFAULT_REPLICATES,
    seed: int = 0,
    detrend_rho: bool = True,
) -> dict[str, BlockTest]:
    """The sign-flip test of every figure both runs have (see the module docstring)."""
    if a.n != b.n:
        raise ValueError("both runs must be cut into the same number of windows")
    m = block_matrix(a.n, block)
    ga, gb = figure_values(a, figs, m), figure_values(b, figs, m)
    patterns = sign_patterns(m.shape[0], reps, np.random.default_rng(seed))
    out: dict[str, BlockTest] = {}
    for f in figs:
        xa, xb = ga.get(f.key), gb.get(f.key)
        if xa is None or xb is None:
            continue
        ok = np.isfinite(xa) & np.isfinite(xb)
        if ok.sum() < 2:
            continue
        scale: Scale = "log" if bool(np.all(xa[ok] > 0) and np.all(xb[ok] > 0)) else "add"
        with np.errstate(divide="ignore", invalid="ignore"):
            d = np.log(xb) - np.log(xa) if scale == "log" else xb - xa
        d = np.where(ok, d, np.nan)
        live = np.where(ok, d, 0.0)
        k = int(ok.sum())
        t = float(live.sum() / k)
        dv = d[ok]
        rho = min(max(lag1(detrended(dv) if detrend_rho else dv), 0.0), MAX_RHO)
        draws = (patterns @ live) / k * math.sqrt((1.0 + rho) / (1.0 - rho))
        out[f.key] = BlockTest(scale, d, t, draws, rho, k)
    return out
