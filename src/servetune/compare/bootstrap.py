"""The circular block bootstrap over a run's time windows.

A replicate draws ``⌈n / b⌉`` blocks of ``b`` consecutive windows (wrapping around the end)
with replacement and keeps the first ``n`` windows drawn; each figure is then recomputed from
the windows drawn, a window counting as often as it was drawn (its *multiplicity*). Percentiles
of the resampled values are computed exactly as numpy's linear-interpolation percentile of the
values repeated by their window's multiplicity, without building that array.

The block length ``b`` is chosen per run by Politis–White (:mod:`.blocklen`) on each figure's
per-window *influence* series — the share of the window's values at or below the run's
estimate for a percentile, the window's sum for a rate, its mean reading for a gauge — and the
longest over the figures compared is used, so that one resampling serves them all (the
figures' intervals can then be made simultaneous).
"""

from __future__ import annotations

import math

import numpy as np

from servetune.compare.blocklen import optimal_block_length
from servetune.compare.figures import FigureDef
from servetune.compare.windows import ValueSet, WindowedRun

_CELLS_PER_CHUNK = 4_000_000
"""Replicates × values computed at once for a percentile (bounds the memory used)."""
MAX_SET_FOR_REPLICATES = 50_000
"""A larger value set (pooled ITL of a long run) is thinned for the replicates only."""


def multiplicities(n: int, block: int, reps: int, rng: np.random.Generator) -> np.ndarray:
    """(reps × n) counts of how often each window was drawn by a circular block bootstrap."""
    block = max(1, min(block, n))
    k = math.ceil(n / block)
    starts = rng.integers(0, n, size=(reps, k))
    idx = (starts[:, :, None] + np.arange(block)[None, None, :]).reshape(reps, k * block)[:, :n]
    idx %= n
    out = np.zeros((reps, n), dtype=np.int64)
    rows = np.repeat(np.arange(reps), n)
    np.add.at(out, (rows, idx.ravel()), 1)
    return out


def weighted_percentiles(vs: ValueSet, mult: np.ndarray, qs: list[float]) -> np.ndarray:
    """(reps × len(qs)) percentiles of ``vs`` with each window's values repeated by its
    multiplicity (NaN for a replicate that drew no value)."""
    reps = mult.shape[0]
    out = np.full((reps, len(qs)), np.nan)
    if vs.size == 0:
        return out
    step = max(1, _CELLS_PER_CHUNK // vs.size)
    for lo in range(0, reps, step):
        m = mult[lo : lo + step]
        w = m[:, vs.window]
        cum = np.cumsum(w, axis=1)
        total = cum[:, -1]
        for j, q in enumerate(qs):
            h = (total - 1) * (q / 100.0)
            r0 = np.floor(h)
            frac = h - r0
            i0 = (cum <= r0[:, None]).sum(axis=1)
            i1 = (cum <= np.minimum(r0 + 1, total - 1)[:, None]).sum(axis=1)
            i0 = np.minimum(i0, vs.size - 1)
            i1 = np.minimum(i1, vs.size - 1)
            val = vs.values[i0] + frac * (vs.values[i1] - vs.values[i0])
            val[total <= 0] = np.nan
            out[lo : lo + step, j] = val
    return out


def _thinned(vs: ValueSet, seed: int = 0) -> ValueSet:
    if vs.size <= MAX_SET_FOR_REPLICATES:
        return vs
    rng = np.random.default_rng(seed)
    keep = np.sort(rng.choice(vs.size, size=MAX_SET_FOR_REPLICATES, replace=False))
    return ValueSet(vs.values[keep], vs.window[keep])


def figure_values(
    run: WindowedRun, figs: list[FigureDef], mult: np.ndarray, exact: bool = True
) -> dict[str, np.ndarray]:
    """Each figure under each row of multiplicities (one value per replicate; NaN when the
    run has no data for it). ``exact=False`` thins very large value sets (replicates only)."""
    reps = mult.shape[0]
    out: dict[str, np.ndarray] = {}
    by_set: dict[str, list[FigureDef]] = {}
    for f in figs:
        if f.kind == "pct":
            by_set.setdefault(f.source, []).append(f)
    for source, group in by_set.items():
        vs = run.sets.get(source)
        if vs is None:
            for f in group:
                out[f.key] = np.full(reps, np.nan)
            continue
        vs = vs if exact else _thinned(vs)
        qs = [float(f.q or 0.0) for f in group]
        vals = weighted_percentiles(vs, mult, qs)
        for j, f in enumerate(group):
            out[f.key] = vals[:, j]
    for f in figs:
        if f.kind == "pct":
            continue
        if f.kind == "mean":
            vs = run.sets.get(f.source)
            if vs is None or vs.size == 0:
                out[f.key] = np.full(reps, np.nan)
                continue
            per_sum = np.bincount(vs.window, weights=vs.values, minlength=run.n)
            per_n = np.bincount(vs.window, minlength=run.n).astype(float)
            num, den = mult @ per_sum, mult @ per_n
            with np.errstate(invalid="ignore", divide="ignore"):
                out[f.key] = np.where(den > 0, num / np.where(den > 0, den, 1), np.nan)
        elif f.kind in ("rate", "count"):
            s = run.sums.get(f.source)
            if s is None:
                out[f.key] = np.full(reps, np.nan)
                continue
            total = mult @ s
            if f.kind == "rate":
                seconds = mult @ run.active
                with np.errstate(invalid="ignore", divide="ignore"):
                    out[f.key] = np.where(
                        seconds > 0, total / np.where(seconds > 0, seconds, 1), np.nan
                    )
            else:
                out[f.key] = total.astype(float)
        elif f.kind == "gauge":
            g = run.gauges.get(f.source)
            if g is None:
                out[f.key] = np.full(reps, np.nan)
                continue
            num, den = mult @ g[0], mult @ g[1]
            with np.errstate(invalid="ignore", divide="ignore"):
                out[f.key] = np.where(den > 0, num / np.where(den > 0, den, 1), np.nan)
        out[f.key] = out[f.key] * f.scale
    return out


def point_estimates(run: WindowedRun, figs: list[FigureDef]) -> dict[str, float]:
    ones = np.ones((1, run.n), dtype=np.int64)
    return {k: float(v[0]) for k, v in figure_values(run, figs, ones).items()}


def influence_series(run: WindowedRun, fig: FigureDef, estimate: float) -> np.ndarray | None:
    """Per-window series whose autocorrelation governs the figure's variance."""
    if fig.kind == "pct":
        vs = run.sets.get(fig.source)
        if vs is None or vs.size == 0 or not math.isfinite(estimate):
            return None
        below = np.bincount(vs.window, weights=(vs.values <= estimate), minlength=run.n)
        count = np.bincount(vs.window, minlength=run.n).astype(float)
        share = np.divide(below, count, out=np.full(run.n, np.nan), where=count > 0)
        # a window without requests is no evidence either way: the run's share
        share[np.isnan(share)] = fig.q / 100.0 if fig.q is not None else 0.5
        result: np.ndarray = share
        return result
    if fig.kind == "mean":
        vs = run.sets.get(fig.source)
        if vs is None or vs.size == 0:
            return None
        s = np.bincount(vs.window, weights=vs.values, minlength=run.n)
        c = np.bincount(vs.window, minlength=run.n).astype(float)
        m = np.divide(s, c, out=np.full(run.n, np.nan), where=c > 0)
        m[np.isnan(m)] = float(np.nanmean(m)) if np.any(c > 0) else 0.0
        means: np.ndarray = m
        return means
    if fig.kind in ("rate", "count"):
        return run.sums.get(fig.source)
    g = run.gauges.get(fig.source)
    if g is None:
        return None
    m = np.divide(g[0], g[1], out=np.full(run.n, np.nan), where=g[1] > 0)
    if not np.any(g[1] > 0):
        return None
    m[np.isnan(m)] = float(np.nanmean(m))
    gauge: np.ndarray = m
    return gauge


def block_length(run: WindowedRun, figs: list[FigureDef], estimates: dict[str, float]) -> int:
    """The longest Politis–White block over the figures' influence series (in windows)."""
    best = 1.0
    for f in figs:
        series = influence_series(run, f, estimates.get(f.key, math.nan))
        if series is None or series.size < 8:
            continue
        best = max(best, optimal_block_length(series))
    return max(1, min(run.n // 2 if run.n >= 2 else 1, round(best)))


DETREND = True


def detrend(x: np.ndarray) -> np.ndarray:
    """``x`` minus its least-squares line (a change that grows through the runs is not noise
    to be kept inside a block)."""
    t = np.arange(x.size, dtype=float)
    ok = np.isfinite(x)
    if ok.sum() < 3:
        return x
    slope, icept = np.polyfit(t[ok], x[ok], 1)
    out: np.ndarray = x - (slope * t + icept)
    return out


def pair_block_length(
    a: WindowedRun,
    b: WindowedRun,
    figs: list[FigureDef],
    est_a: dict[str, float],
    est_b: dict[str, float],
) -> int:
    """Block length for swapping aligned blocks between two runs cut into the same windows:
    the longest Politis–White block over the figures' *difference* series (A's influence
    series minus B's, a percentile's share taken at one threshold for both). What both runs
    share at the same time — a start-up ramp, a queue growing through an overloaded run —
    cancels there, and swapping keeps it in place anyway."""
    best = 1.0
    for f in figs:
        ea, eb = est_a.get(f.key, math.nan), est_b.get(f.key, math.nan)
        if f.kind == "pct":
            both = [x for x in (ea, eb) if math.isfinite(x)]
            if not both:
                continue
            ea = eb = float(np.mean(both))
        sa, sb = influence_series(a, f, ea), influence_series(b, f, eb)
        if sa is None or sb is None or sa.size != sb.size or sa.size < 8:
            continue
        if f.kind == "rate":
            with np.errstate(invalid="ignore", divide="ignore"):
                sa = np.where(a.active > 0, sa / np.where(a.active > 0, a.active, 1), np.nan)
                sb = np.where(b.active > 0, sb / np.where(b.active > 0, b.active, 1), np.nan)
            ok = np.isfinite(sa) & np.isfinite(sb)
            if ok.sum() < 8:
                continue
            sa, sb = sa[ok], sb[ok]
        best = max(best, optimal_block_length(detrend(sa - sb) if DETREND else sa - sb))
    return max(1, min(a.n // 2 if a.n >= 2 else 1, round(best)))
