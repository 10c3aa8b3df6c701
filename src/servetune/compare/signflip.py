"""The noise of a difference between two runs: a sign-flip test on aligned time blocks.

Both runs are cut into the same number of time windows and the windows into ``K`` blocks of
``b`` consecutive windows. Each figure is computed on every block of each run, and block
``j`` of B is set against block ``j`` of A — the same stretch of the same workload's time
line (start-up ramp, steady part, a queue growing through an overloaded run, the drain after
the last arrival)::

    d_j = ln(θ_B,j / θ_A,j)        (θ > 0 in every block of both runs; else θ_B,j − θ_A,j)
    T   = mean_j d_j               (the typical change from A to B at the same moment)

If nothing changed, ``d_j`` and ``−d_j`` are equally likely, whatever the workload's time
structure — provided the blocks are independent, which is why a block lasts at least
:data:`LIFETIMES` times a request's decode (a request shares the batch with the requests that
arrive while it decodes). The test is *studentized*: T over its standard error
``s_d / √K`` (``s_d`` the blocks' spread), so that a difference that shows in every block
stands out by how steady it is — the plain mean T can never exceed √K times its own spread,
which left runs of a dozen blocks unable to call anything. Its no-change replicates flip the
sign of every ``d_j`` at random (all ``2^K`` patterns when there are few blocks) and
studentize each pattern the same way. The family's bound (:func:`family_bound`): with at least
:data:`EXACT_BLOCKS` blocks, the 95% quantile of the largest |t*| over the family's figures
(Westfall–Young max-T, exact under independence and symmetry); with fewer, the patterns are
too few for that quantile and Student's t with K − 1 degrees of freedom, Bonferroni-split
over the family, is used; with fewer than :data:`MIN_VERDICT_BLOCKS` nothing is called.
Dependence the blocks still carry is paid for by the AR(1) factor √((1 + ρ) / (1 − ρ)) on the
standard error, ρ the lag-1 autocorrelation of ``d_j`` (0 ≤ ρ ≤ 0.9) around its quadratic
trend (a change that grows through the runs is a change, not dependence) — or of ``d_j``
itself when both runs were past capacity, where a chance difference in the queue carries on
to the end of the run.

Why not a bootstrap of each run? A P99 rests on a run's few worst episodes (a burst of
arrivals, a queue build-up); resampling one run can only reshuffle its own episodes, never
draw a taller one, and on the simulated engine it put the run-to-run spread of P99 TPOT at
half its true size. Comparing the runs block by block sets each run's episodes against the
other's, and a difference that is real shows in (nearly) every block.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.stats import t as student_t

from servetune.compare.bootstrap import figure_values
from servetune.compare.figures import FigureDef
from servetune.compare.windows import WindowedRun

DEFAULT_REPLICATES = 4000
MIN_BLOCKS = 12
"""The Politis–White block is capped so that the arrivals hold at least this many blocks
(unless a request's life asks for longer ones, :data:`LIFETIMES`)."""
LIFETIMES = 2.0
"""Blocks last at least this many times the longer run's median decode (first to last token):
a request shares the server's batch with the requests that arrive while it decodes, so
shorter blocks share their load with the next block — and a dozen blocks cannot show it in
their own correlation (two seeds of one configuration came out "different" in 15–50% of
pairs with blocks about one decode long)."""
EXACT_BLOCKS = 10
"""From this many blocks the family's bound comes from the sign patterns (2^10 = 1,024 of
them at least); with fewer, their 95% quantile is too coarse (with 6 blocks it is the 4th
largest of 64 values) and Student's t with a Bonferroni split over the family is used."""
MIN_VERDICT_BLOCKS = 5
"""Below this many blocks over the arrivals compare does not call anything: the spread of the
block differences rests on 3 degrees of freedom or fewer."""
MAX_RHO = 0.9
Scale = Literal["log", "add"]


@dataclass
class BlockTest:
    """One figure: per-block differences, their mean T, its standard error and T's no-change
    replicates (studentized)."""

    scale: Scale
    d: np.ndarray
    """Per-block differences (NaN where a block lacks the figure in either run)."""
    t: float
    se: float
    """Standard error of T: the blocks' spread / √K, times the AR(1) factor."""
    tstar: np.ndarray
    """Studentized no-change replicates: each sign pattern's mean over its own standard error
    (the first row is the identity pattern)."""
    rho: float
    blocks: int
    """Blocks that carry the figure in both runs."""

    @property
    def stat(self) -> float:
        """T in units of its standard error (±inf when the blocks agree exactly)."""
        if self.se > 0:
            return self.t / self.se
        return 0.0 if self.t == 0 else math.copysign(math.inf, self.t)


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
        dv = d[ok]
        k = dv.size
        rho = min(max(lag1(detrended(dv) if detrend_rho else dv), 0.0), MAX_RHO)
        widen = math.sqrt((1.0 + rho) / (1.0 - rho))
        se = float(np.std(dv, ddof=1)) / math.sqrt(k) * widen
        tstar = studentized(patterns[:, ok], dv)
        out[f.key] = BlockTest(scale, d, float(dv.mean()), se, tstar, rho, k)
    return out


def studentized(patterns: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Each sign pattern's mean of ``±d_j`` over its own standard error (spread of the flipped
    differences / √K). The plain flipped mean can never exceed the observed one by more than
    √K times its spread, so no steady difference could stand out; studentized, a difference
    that shows in every block is far out in the tail however small."""
    k = d.size
    flipped = patterns * d[None, :]
    mean = flipped.mean(axis=1)
    spread = flipped.std(axis=1, ddof=1) / math.sqrt(k)
    scale = float(np.max(np.abs(d))) if k else 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        out: np.ndarray = np.where(
            spread > 1e-12 * max(scale, 1e-300),
            mean / np.where(spread > 0, spread, 1.0),
            np.where(np.abs(mean) > 1e-12 * max(scale, 1e-300), np.sign(mean) * np.inf, 0.0),
        )
    return out


@dataclass
class FamilyBound:
    """Half-widths that hold for a family of figures at once."""

    half: dict[str, float]
    """Each figure's half-width on T's scale (c × its standard error)."""
    critical: float
    """c (for Student's rule: at the family's fewest blocks)."""
    rule: Literal["sign-flip max-T", "Student-Bonferroni"]


def family_bound(tests: Mapping[str, BlockTest], level: float) -> FamilyBound | None:
    """The family's simultaneous bound (None when it has no figure). With at least
    :data:`EXACT_BLOCKS` blocks in every figure: c is the ``level`` quantile (the next value up)
    of max_f |t*_f| over the sign patterns — Westfall–Young's single-step max-T on studentized
    replicates, exact when the block differences are independent and symmetric under no
    change, however many and however correlated the figures. With fewer: Student's t with
    K − 1 degrees of freedom at level 1 − (1 − ``level``) / (2F) for each of the F figures
    (Bonferroni); Student's critical values are conservative at these levels for any
    differences symmetric about 0 (Efron, 1969), normal or not."""
    live = {key: t for key, t in tests.items() if t.blocks >= 2}
    if not live:
        return None
    fewest = min(t.blocks for t in live.values())
    if fewest >= EXACT_BLOCKS:
        rows = [np.abs(t.tstar) for t in live.values()]
        c = float(np.quantile(np.vstack(rows).max(axis=0), level, method="higher"))
        return FamilyBound({k: c * t.se for k, t in live.items()}, c, "sign-flip max-T")
    tail = (1.0 - level) / (2 * len(live))
    half = {k: float(student_t.ppf(1.0 - tail, t.blocks - 1)) * t.se for k, t in live.items()}
    return FamilyBound(half, float(student_t.ppf(1.0 - tail, fewest - 1)), "Student-Bonferroni")


def p_value(test: BlockTest, rule: str) -> float:
    """The figure's own two-sided p-value (not adjusted for the family)."""
    if rule == "Student-Bonferroni":
        return float(2.0 * student_t.sf(abs(test.stat), test.blocks - 1))
    return float(np.mean(np.abs(test.tstar) >= abs(test.stat) - 1e-12))
