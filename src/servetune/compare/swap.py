"""The no-change replicates of a figure computed from several levels of two sweeps (a knee,
an SLO-max): A's and B's runs of each level swapped block by block at the same moments.

If nothing changed from A to B, the run of a level in A and the one in B are two draws of the
same thing, and so is block ``j`` of each (the same seconds after each run's start, the same
place in the sweep's history: the levels before it ran first in both). A replicate therefore
builds A* and B* level by level, each block of A* taken from A or from B at random and B* from
the other; the figure's shift B* − A* over the replicates is what run-to-run noise alone
makes of it — *between* runs, where a block bootstrap of each run only reshuffles its own
episodes (it never draws a taller P99 than the run had) and calls two seeds of one
configuration "different" half the time.

A level's blocks are the run comparison's (:func:`.blockrule.pair_blocks`): at least two of a
request's decodes long unless both runs were past capacity, so that a block swapped in does
not carry load that belongs to its neighbours in the other run. A level whose requests live
long against it is then swapped in a few blocks, or whole.

Levels are not independent either: a sweep runs them one after another on one server, and
what differs between A and B at one level (the machine's state, a slow stretch) tends to
differ at the next. The blocks' differences, taken in the sweeps' order over all levels, have
a lag-1 autocorrelation ρ (around their quadratic trend, as in :mod:`.signflip`); the
replicates are widened by √((1+ρ)/(1−ρ)), the factor by which ρ inflates the variance of a
sum of correlated terms, so a drift through the sweep is not taken for independent evidence.

The shift is significant when it lies outside the central 95% of the replicates' |shift|
(two-sided); its interval is the observed shift ± that half-width.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from servetune.compare.blockrule import Blocks, pair_blocks
from servetune.compare.bootstrap import figure_values, point_estimates
from servetune.compare.figures import FigureDef
from servetune.compare.signflip import MAX_RHO, block_matrix, detrended, lag1
from servetune.compare.windows import ValueSet, WindowedRun


def stacked(a: WindowedRun, b: WindowedRun) -> WindowedRun:
    """A's ``n`` windows then B's, as one run of ``2n`` windows (multiplicities over it pick
    each window from one run or the other)."""
    n = a.n
    sets: dict[str, ValueSet] = {}
    for key in a.sets.keys() | b.sets.keys():
        va, vb = a.sets.get(key), b.sets.get(key)
        values = np.concatenate([v.values for v in (va, vb) if v is not None])
        windows = np.concatenate([v.window + off for v, off in ((va, 0), (vb, n)) if v is not None])
        sets[key] = ValueSet.build(values.tolist(), windows.tolist())
    zeros = np.zeros(n)
    sums = {
        key: np.concatenate([a.sums.get(key, zeros), b.sums.get(key, zeros)])
        for key in a.sums.keys() | b.sums.keys()
    }
    gauges = {}
    for key in a.gauges.keys() | b.gauges.keys():
        ga, gb = a.gauges.get(key, (zeros, zeros)), b.gauges.get(key, (zeros, zeros))
        gauges[key] = (np.concatenate([ga[0], gb[0]]), np.concatenate([ga[1], gb[1]]))
    return WindowedRun(
        n=2 * n,
        width_s=a.width_s,
        start_s=a.start_s,
        end_s=a.end_s,
        sets=sets,
        sums=sums,
        gauges=gauges,
        requests=a.requests + b.requests,
        active=np.concatenate([a.active, b.active]),
    )


class LevelSwap:
    """One level's two runs (cut into the same windows) and their swap blocks."""

    def __init__(self, a: WindowedRun, b: WindowedRun, figs: list[FigureDef]) -> None:
        if a.n != b.n:
            raise ValueError("both runs must be cut into the same number of windows")
        self.figs = figs
        self.a, self.b = a, b
        est_a, est_b = point_estimates(a, figs), point_estimates(b, figs)
        self.rule: Blocks = pair_blocks(a, b, figs, est_a, est_b)
        self.block = self.rule.windows
        self.blocks = block_matrix(a.n, self.block)
        self.run = stacked(a, b)

    @property
    def k(self) -> int:
        return int(self.blocks.shape[0])

    def block_differences(self) -> dict[str, np.ndarray]:
        """Each figure's per-block difference B − A (log when both are positive)."""
        ga = figure_values(self.a, self.figs, self.blocks)
        gb = figure_values(self.b, self.figs, self.blocks)
        out = {}
        for f in self.figs:
            xa, xb = ga[f.key], gb[f.key]
            with np.errstate(divide="ignore", invalid="ignore"):
                positive = np.all(xa[np.isfinite(xa)] > 0) and np.all(xb[np.isfinite(xb)] > 0)
                out[f.key] = np.log(xb) - np.log(xa) if positive else xb - xa
        return out

    def replicates(self, swaps: np.ndarray) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """A*'s and B*'s figures under each row of SWAPS ((reps × k) of 0/1: 1 swaps the
        block)."""
        per_window = swaps.astype(np.int64) @ self.blocks  # (reps × n): 1 where swapped
        keep = 1 - per_window
        mult_a = np.concatenate([keep, per_window], axis=1)
        mult_b = np.concatenate([per_window, keep], axis=1)
        return (
            figure_values(self.run, self.figs, mult_a, False),
            figure_values(self.run, self.figs, mult_b, False),
        )


def sweep_rho(levels: Sequence[LevelSwap]) -> float:
    """The lag-1 autocorrelation of the blocks' differences over all levels in the sweeps'
    order (the largest over the figures; 0 to MAX_RHO)."""
    series: dict[str, list[float]] = {}
    for lv in levels:
        for key, d in lv.block_differences().items():
            series.setdefault(key, []).extend(float(x) for x in d)
    best = 0.0
    for values in series.values():
        x = np.array([v for v in values if math.isfinite(v)])
        if x.size >= 6:
            best = max(best, lag1(detrended(x)))
    return min(max(best, 0.0), MAX_RHO)


def widening(rho: float) -> float:
    return math.sqrt((1.0 + rho) / (1.0 - rho))
