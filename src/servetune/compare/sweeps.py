"""Compare two sweeps: the curves side by side, level by level, and the knee and the
SLO-max rate with their uncertainty and their shift.

- Each load both sweeps ran is compared as two runs (:func:`.runs.compare_runs`).
- A sweep's own knee and SLO-max come with a 95% interval from a block bootstrap of every
  level (each level's run resampled in Politis–White time blocks, the curve re-fitted per
  replicate). This is the within-run spread: it does not see how a P99 resting on one episode
  varies between runs, nor load that a request carries past its block, so it is a lower bound
  on the uncertainty (labelled so).
- The *shift* (B − A) is tested against run-to-run noise (:mod:`.swap`): the no-change
  replicates swap A's and B's runs of each level block by block at the same moments — blocks
  cut by the run comparison's rule (:mod:`.blockrule`: at least two of a request's decodes
  unless both runs were past capacity) — widened for the dependence of the blocks'
  differences through the sweeps (levels run one after another on one server). Its interval
  is the observed shift ± the replicates' 95% half-width (and takes in the two bootstraps'
  difference too); it moved when that interval excludes 0. The two independent bootstraps
  alone called two seeds of one configuration "moved" in half the pairs; the swap, in none
  of 60 pairs over three model × GPU workloads (``benchmarks/compare_sweep_calibration.py``).
- The SLO-max is a threshold crossing: it is decided by the one or two levels around it, and
  near capacity a level's P99 TTFT is 1 s in one seed and 4 s in the next (the realized
  arrivals run a few percent apart for the whole run; swapping blocks of the two runs mixes
  their tails and does not see that). So its shift counts as a move only when, at a level
  that brackets either sweep's SLO-max, the run comparison (:func:`.runs.compare_runs`,
  calibrated on pairs of seeds) finds the limiting P99, or the requests/s completed, different
  beyond run-to-run noise in the shift's direction — a wait (TTFT, E2E) counting only at a
  level where neither run's queue grew through the run (at capacity one seed's P99 TTFT is
  1 s, the next one's 4 s, while both complete what capacity allows).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from servetune.compare.blockrule import past_capacity
from servetune.compare.bootstrap import block_length, figure_values, multiplicities
from servetune.compare.bootstrap import point_estimates as _points
from servetune.compare.comparable import Difference, config_differences, run_differences
from servetune.compare.figures import BY_KEY, FigureDef
from servetune.compare.inputs import RunInput, SweepInput
from servetune.compare.model import CurveRow, Estimate, SweepComparison
from servetune.compare.runs import QUEUEING_SOURCES, compare_runs, paired_windows
from servetune.compare.swap import LevelSwap, sweep_rho, widening
from servetune.compare.windows import WindowedRun, build_windows
from servetune.results.schema import Slo
from servetune.results.sweep_schema import LevelRow
from servetune.sweep.knee import find_knee
from servetune.sweep.slo import find_slo_max, slo_items

DEFAULT_CURVE_REPLICATES = 200
ROW_FIELDS: dict[str, str] = {
    "p99_ttft_ms": "ttft_p99",
    "p99_tpot_ms": "tpot_p99",
    "p99_e2el_ms": "e2el_p99",
    "request_throughput": "request_throughput",
    "output_throughput": "output_throughput",
    "mean_e2el_ms": "e2el_mean",
}
CURVE_FIGS: list[FigureDef] = [BY_KEY[k] for k in ROW_FIELDS]
SIDE_BY_SIDE = (
    "request_throughput",
    "output_throughput",
    "p99_ttft_ms",
    "p99_tpot_ms",
    "p99_e2el_ms",
)


def _by_load(rows: Sequence[LevelRow]) -> dict[float, LevelRow]:
    out: dict[float, LevelRow] = {}
    for r in sorted(rows, key=lambda r: r.label):
        if r.role == "level" and r.completed > 0:
            out.setdefault(r.load, r)
    return out


def _windowed(run: RunInput, slo: Slo | None, n: int | None = None) -> WindowedRun:
    cfg = run.result.config
    return build_windows(run.records, run.samples, cfg.warmup_s, cfg.cooldown_s, slo, n)


def _replicate_rows(
    rows: Sequence[LevelRow], values: dict[str, dict[str, np.ndarray]], i: int
) -> list[LevelRow]:
    """The sweep's rows with replicate ``i``'s figures for the levels in ``values``."""
    out = []
    for r in rows:
        v = values.get(r.label)
        if v is None:
            out.append(r)
            continue
        update = {}
        for key, field in ROW_FIELDS.items():
            if key in v:
                x = float(v[key][i])
                update[field] = x if math.isfinite(x) else None
        out.append(r.model_copy(update=update))
    return out


Curve = Callable[[Sequence[LevelRow]], float | None]


def knee_of(mode: str, k: float) -> Curve:
    def f(rows: Sequence[LevelRow]) -> float | None:
        knee = find_knee(rows, mode, k=k)  # type: ignore[arg-type]
        return knee.throughput if knee.status == "found" else None

    return f


def slo_max_of(mode: str, slo: Slo) -> Curve:
    def f(rows: Sequence[LevelRow]) -> float | None:
        sm = find_slo_max(rows, slo, mode)  # type: ignore[arg-type]
        return sm.offered if sm is not None and sm.status == "found" else None

    return f


def _interval(values: Sequence[float | None], center: float | None, what: str) -> Estimate:
    finite = np.array([v for v in values if v is not None and math.isfinite(v)])
    if center is None:
        return Estimate(status=f"no {what} in the sweep")
    if finite.size < max(10, len(values) // 2):
        share = finite.size / max(1, len(values))
        return Estimate(
            value=center,
            status=f"{what} found in only {share:.0%} of the replicates: not pinned down",
        )
    lo, hi = np.percentile(finite, [2.5, 97.5])
    return Estimate(value=center, low=float(min(lo, center)), high=float(max(hi, center)))


def _curve_draws(
    sweep: SweepInput,
    rows: Sequence[LevelRow],
    curve: Curve,
    slo: Slo | None,
    reps: int,
    seed: int,
) -> list[float | None]:
    """The curve figure of ``reps`` block-bootstrap replicates of every level."""
    values: dict[str, dict[str, np.ndarray]] = {}
    rng = np.random.default_rng(seed)
    for r in rows:
        if r.completed <= 0:
            continue
        w = _windowed(sweep.level_run(r), slo)
        est = _points(w, CURVE_FIGS)
        block = block_length(w, CURVE_FIGS, est)
        values[r.label] = figure_values(w, CURVE_FIGS, multiplicities(w.n, block, reps, rng), False)
    return [curve(_replicate_rows(rows, values, i)) for i in range(reps)]


class SwapNull:
    """The no-change replicates of both sweeps' curves (see :mod:`.swap`), built once for the
    knee and the SLO-max: A*'s and B*'s rows per replicate, and the widening for the blocks'
    dependence through the sweeps."""

    def __init__(
        self,
        a: SweepInput,
        b: SweepInput,
        pairs: Sequence[tuple[LevelRow, LevelRow]],
        slo: Slo | None,
        reps: int,
        seed: int,
    ) -> None:
        rng = np.random.default_rng(seed)
        values_a: dict[str, dict[str, np.ndarray]] = {}
        values_b: dict[str, dict[str, np.ndarray]] = {}
        levels = []
        for ra, rb in pairs:
            wa, wb = paired_windows(a.level_run(ra), b.level_run(rb), slo)
            lv = LevelSwap(wa, wb, CURVE_FIGS)
            levels.append(lv)
            swaps = rng.integers(0, 2, size=(reps, lv.k))
            values_a[ra.label], values_b[rb.label] = lv.replicates(swaps)
        self.reps = reps
        self.values_a, self.values_b = values_a, values_b
        self.rho = sweep_rho(levels) if levels else 0.0

    def shifts(
        self, rows_a: Sequence[LevelRow], rows_b: Sequence[LevelRow], curve: Curve
    ) -> list[float | None]:
        out: list[float | None] = []
        for i in range(self.reps):
            x = curve(_replicate_rows(rows_a, self.values_a, i))
            y = curve(_replicate_rows(rows_b, self.values_b, i))
            out.append(None if x is None or y is None else y - x)
        return out


def curve_estimates(
    a: SweepInput,
    b: SweepInput,
    rows_a: Sequence[LevelRow],
    rows_b: Sequence[LevelRow],
    curve: Curve,
    slo: Slo | None,
    reps: int,
    seed: int,
    what: str,
    null: SwapNull | None = None,
) -> tuple[Estimate, Estimate, Estimate, bool]:
    """A's and B's knee (or SLO-max) with their within-run intervals, the shift B − A with its
    interval against run-to-run noise (NULL's swap replicates; without them, the two
    bootstraps' difference only), and whether the shift's interval excludes 0."""
    da = _curve_draws(a, rows_a, curve, slo, reps, seed)
    db = _curve_draws(b, rows_b, curve, slo, reps, seed + 1)
    ca, cb = curve(rows_a), curve(rows_b)
    ea, eb = _interval(da, ca, what), _interval(db, cb, what)
    if ca is None or cb is None:
        return ea, eb, Estimate(status=f"no {what} in both sweeps"), False
    shifts = [(y - x) for x, y in zip(da, db, strict=True) if x is not None and y is not None]
    if len(shifts) < max(10, reps // 2):
        return ea, eb, Estimate(value=cb - ca, status=f"the {what} is not pinned down"), False
    arr = np.array(shifts)
    lo, hi = np.percentile(arr - np.median(arr), [2.5, 97.5])
    observed = cb - ca
    low, high = observed + float(lo), observed + float(hi)
    if null is not None:
        drawn = [d for d in null.shifts(rows_a, rows_b, curve) if d is not None]
        if len(drawn) < max(10, null.reps // 2):
            return (
                ea,
                eb,
                Estimate(
                    value=observed,
                    status=f"the {what} is not pinned down when the sweeps' runs are swapped",
                ),
                False,
            )
        half = float(np.percentile(np.abs(np.array(drawn)), 95)) * widening(null.rho)
        low, high = min(low, observed - half), max(high, observed + half)
    shift = Estimate(value=observed, low=low, high=high)
    return ea, eb, shift, bool(low > 0 or high < 0)


def slo_support(
    a: SweepInput,
    b: SweepInput,
    rows_a: Sequence[LevelRow],
    rows_b: Sequence[LevelRow],
    out: SweepComparison,
    slo: Slo,
    replicates: int,
    seed: int,
) -> str | None:
    """The level whose run comparison shows the SLO-max's shift beyond run-to-run noise (its
    label and the figure), or None: at a load that brackets either sweep's SLO-max, one of the
    SLO's P99s significantly better in B when the SLO-max rose (worse when it fell)."""
    shift = out.slo_max_shift.value
    if shift is None or shift == 0:
        return None
    mode = out.mode
    loads: set[float] = set()
    for rows in (rows_a, rows_b):
        sm = find_slo_max(rows, slo, mode)  # type: ignore[arg-type]
        if sm is not None and sm.bracket is not None:
            loads |= {r.load for r in rows if r.label in sm.bracket}
    wanted = "better" if shift > 0 else "worse"
    # the SLO's P99s; and the requests completed: a load one sweep sustains and the other
    # does not is what moves a queueing-limited SLO-max, and throughput stays comparable
    # where a queue grew (compare_runs tests it there too)
    keys = [f"p99_{m}_ms" for m, _ in slo_items(slo)] + ["request_throughput"]
    la, lb = _by_load(rows_a), _by_load(rows_b)
    by_load = {(r.load if isinstance(r.load, float) else math.inf): r for r in out.rows}
    for load in sorted(loads & la.keys() & lb.keys()):
        ra, rb = la[load], lb[load]
        row = by_load.get(load)
        pc = row.comparison if row is not None else None
        if pc is None:
            pc = compare_runs(
                a.level_run(ra), b.level_run(rb), slo, check=False, replicates=replicates, seed=seed
            )
        # a queue that grew through either run: at capacity a P99 TTFT is 1 s in one seed
        # and 4 s in the next, so the waits there are no evidence either way
        grew = any(past_capacity(w) for w in paired_windows(a.level_run(ra), b.level_run(rb), slo))
        for k in keys:
            f = pc.figures.get(k)
            if grew and BY_KEY[k].source in QUEUEING_SOURCES:
                continue
            if f is not None and f.significant and f.verdict == wanted:
                return f"{ra.label}: {f.label} {wanted}"
    return None


def _pairs(
    rows_a: Sequence[LevelRow], rows_b: Sequence[LevelRow]
) -> list[tuple[LevelRow, LevelRow]]:
    """The runs both sweeps made at one load (and repeat), in the sweeps' order."""

    def key(r: LevelRow) -> tuple[float, str]:
        return (r.load, r.label)

    by_a = {key(r): r for r in rows_a if r.role == "level" and r.completed > 0}
    by_b = {key(r): r for r in rows_b if r.role == "level" and r.completed > 0}
    return [(by_a[k], by_b[k]) for k in sorted(by_a.keys() & by_b.keys())]


def compare_sweeps(
    a: SweepInput,
    b: SweepInput,
    slo: Slo | None = None,
    *,
    force: bool = False,
    replicates: int = 1000,
    curve_replicates: int = DEFAULT_CURVE_REPLICATES,
    seed: int = 0,
    levels: bool = True,
) -> SweepComparison:
    """Two sweeps compared (see the module docstring)."""
    sa, sb = a.result, b.result
    out = SweepComparison(a=a.label, b=b.label, mode=sa.config.mode)
    diffs = [
        d
        for d in config_differences(sa.config.bench, sb.config.bench)
        if d.field not in ("request_rate", "max_concurrency")
    ]
    if sa.config.mode != sb.config.mode:
        diffs.append(
            Difference(
                field="sweep mode",
                a=sa.config.mode,
                b=sb.config.mode,
                severity="refuse",
                why="one sweeps the request rate, the other the concurrency",
            )
        )
    la, lb = _by_load(sa.rows), _by_load(sb.rows)
    common = sorted(la.keys() & lb.keys())
    only = sorted(la.keys() ^ lb.keys())
    if only:
        diffs.append(
            Difference(
                field="levels",
                a=sorted(la),
                b=sorted(lb),
                severity="note",
                why=f"{len(only)} load(s) swept by one only; compared where both ran",
            )
        )
    pairs = [(la[x], lb[x]) for x in common]
    if pairs:
        first_a, first_b = a.level_run(pairs[0][0]), b.level_run(pairs[0][1])
        for d in run_differences(first_a.result, first_b.result):
            if d.field in ("request_rate", "max_concurrency") or any(
                d.field == e.field for e in diffs
            ):
                continue
            diffs.append(d)
        from servetune.compare.comparable import flag_differences

        out.flags, out.flags_recorded = flag_differences(
            first_a.result, first_b.result, sa.config.server_cmd, sb.config.server_cmd
        )
    else:
        diffs.append(
            Difference(
                field="levels",
                a=sorted(la),
                b=sorted(lb),
                severity="refuse",
                why="no load was swept by both",
            )
        )
    out.differences = diffs
    refusals = [d for d in diffs if d.severity == "refuse"]
    if refusals and not (force and pairs):
        out.comparable = False
        out.verdict = (
            f"not comparable: {len(refusals)} difference(s) in what the servers were asked to "
            "do (see differences)" + ("; --force compares anyway" if pairs else "")
        )
        return out
    out.forced = bool(refusals)
    if slo is None or slo.is_empty():
        slo = (
            sa.config.bench.goodput
            if not sa.config.bench.goodput.is_empty()
            else (sb.config.bench.goodput)
        )
    out.slo = {k: v for k, v in slo.model_dump().items() if v is not None}
    for load in common:
        ra, rb = la[load], lb[load]
        row = CurveRow(load="inf" if math.isinf(load) else load)
        for key in SIDE_BY_SIDE:
            field = ROW_FIELDS[key]
            row.a[key] = getattr(ra, field)
            row.b[key] = getattr(rb, field)
        if levels:
            pc = compare_runs(
                a.level_run(ra),
                b.level_run(rb),
                slo,
                check=False,
                replicates=replicates,
                seed=seed,
            )
            row.significant = {k: f.significant for k, f in pc.figures.items() if f.headline}
            row.comparison = pc
        out.rows.append(row)
    mode = sa.config.mode
    rows_a = [r for r in sa.rows if r.role != "confirm"]
    rows_b = [r for r in sb.rows if r.role != "confirm"]
    null = SwapNull(a, b, _pairs(rows_a, rows_b), slo, curve_replicates, seed + 3)
    knee = knee_of(mode, sa.config.knee_k)
    out.knee_a, out.knee_b, out.knee_shift, knee_sig = curve_estimates(
        a, b, rows_a, rows_b, knee, slo, curve_replicates, seed, "knee", null
    )
    slo_sig = False
    if not slo.is_empty():
        sm = slo_max_of(mode, slo)
        out.slo_max_a, out.slo_max_b, out.slo_max_shift, slo_sig = curve_estimates(
            a, b, rows_a, rows_b, sm, slo, curve_replicates, seed + 2, "SLO-max", null
        )
    if slo_sig:
        why = slo_support(a, b, rows_a, rows_b, out, slo, replicates, seed)
        if why is None:
            slo_sig = False
            out.slo_max_shift.status = (
                "no level around either SLO-max differs beyond run-to-run noise in its limiting "
                "P99 (compare_runs): the shift may be the crossing's chance"
            )
    out.verdict = _verdict(out, knee_sig, slo_sig)
    if out.forced:
        out.warnings.append("compared with --force although the sweeps are not comparable")
    out.warnings += [d.text() for d in diffs if d.severity in ("refuse", "warn")]
    return out


def _fmt_shift(est: Estimate, unit: str) -> str:
    if est.value is None:
        return est.status
    sign = "+" if est.value >= 0 else ""
    text = f"{sign}{est.value:.3g} {unit}"
    if est.low is not None and est.high is not None:
        text += f" (95% interval {est.low:+.3g} … {est.high:+.3g})"
    return text


def _verdict(out: SweepComparison, knee_sig: bool, slo_sig: bool) -> str:
    unit = "req/s" if out.mode == "rate" else ""
    parts = []
    if out.slo_max_shift.value is not None:
        parts.append(
            f"SLO-max {'moved' if slo_sig else 'did not move significantly'}: "
            f"{_fmt_shift(out.slo_max_shift, 'req/s' if out.mode == 'rate' else '')}"
            + (
                f" — {out.slo_max_shift.status}"
                if out.slo_max_shift.status and out.slo_max_shift.value is not None
                else ""
            )
        )
    if out.knee_shift.value is not None:
        parts.append(
            f"knee {'moved' if knee_sig else 'did not move significantly'}: "
            f"{_fmt_shift(out.knee_shift, unit or 'req/s')}"
        )
    levels_sig = [r for r in out.rows if any(r.significant.values())]
    parts.append(f"{len(levels_sig)} of {len(out.rows)} common loads differ significantly")
    return "; ".join(parts)
