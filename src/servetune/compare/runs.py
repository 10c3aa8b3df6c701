"""Compare two runs figure by figure (the statistics: :mod:`.signflip`, :mod:`.stats`).

Each figure's value in A and in B is the whole run's (the summary's figure, recomputed from the
requests: goodput with one SLO for both). Its interval and significance come from the
sign-flip test on aligned time blocks: A's value × (e^(T ± h) − 1) for a figure compared as
a ratio — T the typical log ratio B/A over the blocks, h the half-width that holds over the
figure's family — i.e. the change at the same moments of the two runs. A tail percentile of
the whole run rests on a few episodes and can differ by more; the interval is widened to take
in the whole-run difference, and a difference is significant when the interval excludes 0
(both agree on the direction and the typical change is beyond the noise).
"""

from __future__ import annotations

import math

import numpy as np

from servetune.compare.bootstrap import pair_block_length, point_estimates
from servetune.compare.comparable import Difference, flag_differences, run_differences
from servetune.compare.figures import BY_KEY, FIGURES, FigureDef
from servetune.compare.inputs import RunInput
from servetune.compare.model import FigureResult, Method, PairComparison
from servetune.compare.signflip import DEFAULT_REPLICATES, MIN_BLOCKS, block_tests
from servetune.compare.stats import DEFAULT_LEVEL, max_t_critical
from servetune.compare.windows import (
    WindowedRun,
    build_windows,
    common_width,
    has_figure,
    window_count,
)
from servetune.results.schema import Slo

GROWTH_WARN = 3.0
LIFETIMES = 1.5
"""Blocks shorter than this many times a request's decode are not independent enough for
the test's 5%: two seeds of one configuration came out "different" in 15–50% of pairs
(simulated engine; Llama-3.1-8B/H100 512/256 at 15 req/s, 1,000 requests, blocks ≈ 1.0
decode: 8 of 40; 256/1,024: 10 of 20; 60 s runs of 1,024/128 at 8 req/s: 6 of 40), against
7 of 120 for the calibration workload at 8 req/s (blocks 1.6–2.7 decodes)."""
QUEUEING_SOURCES = ("ttft", "e2el", "good")
"""What a request's wait in the queue is part of."""


def _slo_dict(slo: Slo | None) -> dict[str, float]:
    return {} if slo is None else {k: v for k, v in slo.model_dump().items() if v is not None}


def arrival_windows(run: WindowedRun) -> int:
    """Windows up to the last one a measured request was scheduled in."""
    vs = run.sets.get("ttft")
    return int(vs.window.max()) + 1 if vs is not None and vs.size else 0


def queue_growth(run: WindowedRun) -> float | None:
    """Median TTFT of the last quarter of the requests (in the order they were scheduled)
    over the first quarter's: well above 1 when the queue grew through the run."""
    vs = run.sets.get("ttft")
    if vs is None or vs.size < 8:
        return None
    order = np.argsort(vs.window, kind="stable")
    q = max(1, vs.size // 4)
    first = vs.values[order[:q]]
    last = vs.values[order[-q:]]
    lo = float(np.median(first))
    return float(np.median(last)) / lo if lo > 0 else None


def _verdict_of(fig: FigureDef, sig: bool, delta: float | None) -> str:
    if delta is None:
        return "not measured"
    if not sig:
        return "same"
    up = delta > 0
    return "better" if up == (fig.better == "higher") else "worse"


def compare_runs(
    a: RunInput,
    b: RunInput,
    slo: Slo | None = None,
    *,
    force: bool = False,
    replicates: int = DEFAULT_REPLICATES,
    level: float = DEFAULT_LEVEL,
    seed: int = 0,
    server_cmds: tuple[str | None, str | None] = (None, None),
    check: bool = True,
) -> PairComparison:
    """A's and B's figures, B − A with simultaneous intervals, and whether they differ.

    ``slo``: the goodput SLO used for both (default: A's, when it has one). With ``check``,
    an incomparable pair comes back with ``comparable=False`` and no figures unless ``force``.
    """
    ra, rb = a.result, b.result
    out = PairComparison(a=a.label, b=b.label)
    diffs: list[Difference] = run_differences(ra, rb) if check else []
    out.differences = diffs
    out.flags, out.flags_recorded = flag_differences(ra, rb, *server_cmds)
    refusals = [d for d in diffs if d.severity == "refuse"]
    if refusals and not force:
        out.comparable = False
        out.verdict = (
            f"not comparable: {len(refusals)} difference(s) in what the server was asked to do "
            "(see differences); --force compares anyway"
        )
        return out
    out.forced = bool(refusals)
    if slo is None or slo.is_empty():
        slo = ra.config.goodput if not ra.config.goodput.is_empty() else rb.config.goodput
    out.slo = _slo_dict(slo)
    wa, wb = paired_windows(a, b, slo)
    figures, out.method = compare_windows(wa, wb, bool(out.slo), replicates, level, seed)
    out.figures = figures
    blocks = out.method.blocks
    out.warnings += _warnings(out, wa, wb, blocks)
    out.verdict = _verdict(out)
    return out


def paired_windows(a: RunInput, b: RunInput, slo: Slo | None) -> tuple[WindowedRun, WindowedRun]:
    """Both runs cut into the same number of windows of one length (the same seconds after
    each run's start)."""
    ca, cb = a.result.config, b.result.config
    n = window_count(min(len(a.records), len(b.records)))
    width = common_width(
        [(a.records, ca.warmup_s, ca.cooldown_s), (b.records, cb.warmup_s, cb.cooldown_s)], n
    )
    return (
        build_windows(a.records, a.samples, ca.warmup_s, ca.cooldown_s, slo, n, width),
        build_windows(b.records, b.samples, cb.warmup_s, cb.cooldown_s, slo, n, width),
    )


def compare_windows(
    wa: WindowedRun,
    wb: WindowedRun,
    with_slo: bool = False,
    replicates: int = DEFAULT_REPLICATES,
    level: float = DEFAULT_LEVEL,
    seed: int = 0,
) -> tuple[dict[str, FigureResult], Method]:
    """Every figure of two runs cut into the same windows, with its interval and verdict."""
    figs = [
        f for f in FIGURES if has_figure(wa, f.source, f.kind) or has_figure(wb, f.source, f.kind)
    ]
    headline = {f.key for f in figs if f.headline}
    if with_slo and any(f.key == "request_goodput" for f in figs):
        headline.add("request_goodput")
    est_a, est_b = point_estimates(wa, figs), point_estimates(wb, figs)
    head_figs = [f for f in figs if f.key in headline]
    n = wa.n
    # at least MIN_BLOCKS blocks over the stretch where requests arrived (after it, a run
    # only drains: no latency is measured there)
    span = max(arrival_windows(wa), arrival_windows(wb)) or n
    block = min(pair_block_length(wa, wb, head_figs, est_a, est_b), max(1, span // MIN_BLOCKS))
    # Both runs past capacity: the queue carries chance differences from block to block for
    # the rest of the run (a random walk), so the blocks' dependence is taken as it is; else a
    # change that grows through the runs is a change, not dependence (ρ of detrended d_j).
    persistent = all((g := queue_growth(w)) is not None and g >= GROWTH_WARN for w in (wa, wb))
    tests = block_tests(wa, wb, figs, block, replicates, seed, detrend_rho=not persistent)
    if persistent:
        # Both queues grew through the runs: a request's wait is the backlog of the arrivals
        # before it, and the runs' realized arrivals differ by chance for the whole run (a
        # few percent more requests early in one run keep every later request of it waiting
        # longer). Waits, and the figures that include them, are then not comparable; the
        # engine's own speed (TPOT, ITL, throughput) still is.
        for key in [k for k in tests if BY_KEY[k].source in QUEUEING_SOURCES]:
            del tests[key]
    blocks = math.ceil(n / block)
    method = Method(
        windows=n,
        window_s=(wa.width_s, wb.width_s),
        block_windows=block,
        blocks=blocks,
        replicates=min(replicates, 2**blocks),
        level=level,
        decode_s=max(wa.decode_s, wb.decode_s),
    )
    # (past capacity in both runs the queue's own dependence is taken as it is, and the
    # calibration holds there: 1 of 40 at three times the capacity)
    method.short_blocks = not persistent and block * wa.width_s < LIFETIMES * method.decode_s
    half: dict[str, float] = {}
    figures: dict[str, FigureResult] = {}
    for name, keys in (("headline", headline), ("detail", {f.key for f in figs} - headline)):
        fam = {k: t.draws for k, t in tests.items() if k in keys}
        hw, c = max_t_critical(fam, level)
        half.update(hw)
        if fam and math.isfinite(c):
            method.family_critical[name] = c
    for f in figs:
        va, vb = est_a.get(f.key, math.nan), est_b.get(f.key, math.nan)
        res = FigureResult(label=f.label, unit=f.unit, better=f.better, headline=f.key in headline)
        res.a = va if math.isfinite(va) else None
        res.b = vb if math.isfinite(vb) else None
        if res.a is None or res.b is None:
            figures[f.key] = res
            continue
        res.delta = vb - va
        res.rel = (vb - va) / va if va != 0 else None
        test, width = tests.get(f.key), half.get(f.key)
        if test is not None and width is not None:
            lo, hi = test.t - width, test.t + width
            if test.scale == "log":
                lo, hi = va * math.expm1(lo), va * math.expm1(hi)
            elif f.kind == "count":
                # a count's block values add up to the run's; a rate's do not (the run's rate
                # is the blocks' rates averaged over their seconds), so its T ± h stands as is
                lo, hi = lo * test.blocks, hi * test.blocks
            # The interval holds the typical change at the same moments of both runs; it is
            # widened to take in the whole-run difference too, so that a difference is called
            # only when both agree on its direction.
            res.ci_low, res.ci_high = min(lo, res.delta), max(hi, res.delta)
            res.significant = res.delta != 0 and (res.ci_low > 0 or res.ci_high < 0)
            res.p_value = float(np.mean(np.abs(test.draws) >= abs(test.t) - 1e-12))
        res.verdict = _verdict_of(f, res.significant, res.delta)  # type: ignore[assignment]
        if persistent and f.source in QUEUEING_SOURCES and res.delta is not None:
            res.verdict = "past capacity"
        figures[f.key] = res
    return figures, method


def _warnings(out: PairComparison, wa: WindowedRun, wb: WindowedRun, blocks: int) -> list[str]:
    warns = [f"{d.text()}" for d in out.differences if d.severity in ("refuse", "warn")]
    if out.forced:
        warns.insert(0, "compared with --force although the runs are not comparable")
    m = out.method
    if m.short_blocks:
        warns.append(
            f"the blocks ({m.block_windows * m.window_s[0]:.1f} s) are shorter than "
            f"{LIFETIMES:g}× a request's decode ({m.decode_s:.1f} s): neighbouring blocks share "
            "their load, and "
            "two seeds of one configuration come out 'different' well over 5% of the time in "
            "such runs (15–50% measured); run longer (more --num-prompts) before acting on a "
            "difference"
        )
    if blocks < MIN_BLOCKS:
        warns.append(
            f"the runs hold only {blocks} independent stretches of time (blocks of "
            f"{out.method.block_windows} windows): too short to show a difference at 95%; "
            "run longer (more --num-prompts)"
        )
    for side, w in (("A", wa), ("B", wb)):
        g = queue_growth(w)
        if g is not None and g >= GROWTH_WARN:
            warns.append(
                f"run {side}: the queue grew through the run (median TTFT ×{g:.1f} from the first "
                "to the last quarter): the server was past its capacity, so its waits depend on "
                "the run's length and its realized arrivals"
                + (
                    "; with both runs past capacity, TTFT, E2E and goodput are not tested "
                    "(throughput, TPOT and ITL are)"
                    if side == "B"
                    and all(
                        (x := queue_growth(v)) is not None and x >= GROWTH_WARN for v in (wa, wb)
                    )
                    else ""
                )
            )
    return warns


def _verdict(out: PairComparison) -> str:
    head = {k: f for k, f in out.figures.items() if f.headline and f.delta is not None}
    sig = {k: f for k, f in head.items() if f.significant}
    if not head:
        return "nothing to compare: no figure was measured in both runs"
    if not sig:
        return (
            f"no significant difference on the headline figures ({len(head)} compared, "
            "intervals hold together at 95%)"
        )
    better = [f.label for f in sig.values() if f.verdict == "better"]
    worse = [f.label for f in sig.values() if f.verdict == "worse"]
    parts = []
    if better:
        parts.append("better " + ", ".join(better))
    if worse:
        parts.append("worse " + ", ".join(worse))
    if out.method.short_blocks:
        return f"B may differ from A (short run: see the warning on blocks): {'; '.join(parts)}"
    return f"B differs from A: {'; '.join(parts)}"
