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

from servetune.compare.blockrule import pair_blocks, past_capacity, queue_growth
from servetune.compare.bootstrap import point_estimates
from servetune.compare.comparable import Difference, flag_differences, run_differences
from servetune.compare.figures import BY_KEY, FIGURES, FigureDef
from servetune.compare.inputs import RunInput
from servetune.compare.model import FigureResult, Method, PairComparison
from servetune.compare.signflip import (
    DEFAULT_REPLICATES,
    LIFETIMES,
    MIN_BLOCKS,
    MIN_VERDICT_BLOCKS,
    block_tests,
    family_bound,
    p_value,
)
from servetune.compare.stats import DEFAULT_LEVEL
from servetune.compare.windows import (
    WindowedRun,
    build_windows,
    common_width,
    has_figure,
    window_count,
)
from servetune.results.schema import Slo

QUEUEING_SOURCES = ("ttft", "e2el", "good")
"""What a request's wait in the queue is part of."""
PAST_CAPACITY_UNTESTED = (*QUEUEING_SOURCES, "tpot", "itl")
"""What is shown but not tested when both runs were past capacity: every per-request latency.
The waits carry the queue's chance backlog for the rest of the run; so does the token pace —
two seeds of one configuration past capacity (Llama-3.1-8B/L4 512/128 at 4 and 5 req/s,
capacity ~3.2) came out with P99 TPOT "different" in 18 of 40 pairs (118 vs 159 ms), the
difference of one sign in nearly every block of the run, which no block length short of the
whole run separates from a change. Throughput, the engine's rate at saturation, stays tested
(benchmarks/compare_past_capacity.py)."""


def _slo_dict(slo: Slo | None) -> dict[str, float]:
    return {} if slo is None else {k: v for k, v in slo.model_dump().items() if v is not None}


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
    out.warnings += _warnings(out, wa, wb)
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
    # the blocks (blockrule): over the arrivals, at least LIFETIMES decodes long unless both
    # runs were past capacity — there the queue carries chance differences from block to block
    # for the rest of the run (a random walk), so the per-request latencies are not tested and
    # the blocks' dependence is taken as it is for throughput; else a change that grows through
    # the runs is a change, not dependence (ρ of detrended d_j). A run too short for enough
    # blocks is said to be so, not tested.
    rule = pair_blocks(wa, wb, head_figs, est_a, est_b)
    block, span, persistent, decode_s = rule.windows, rule.span, rule.persistent, rule.decode_s
    tests = block_tests(wa, wb, figs, block, replicates, seed, detrend_rho=not persistent)
    if persistent:
        # Both queues grew through the runs: a request's wait is the backlog of the arrivals
        # before it, and the runs' realized arrivals differ by chance for the whole run (a
        # few percent more requests early in one run keep every later request of it waiting
        # longer). Waits, and the figures that include them, are then not comparable, and
        # neither is the token pace (TPOT, ITL: when each run's batch filled, and what it
        # held, is the same chance, one sign for the rest of the run); throughput still is.
        for key in [k for k in tests if BY_KEY[k].source in PAST_CAPACITY_UNTESTED]:
            del tests[key]
    blocks = math.ceil(n / block)
    method = Method(
        windows=n,
        window_s=(wa.width_s, wb.width_s),
        block_windows=block,
        blocks=blocks,
        arrival_blocks=rule.arrival_blocks,
        replicates=min(replicates, 2**blocks),
        level=level,
        decode_s=decode_s,
    )
    method.needed_requests = needed_requests(wa, wb, span, block)
    if method.arrival_blocks < MIN_VERDICT_BLOCKS:
        method.too_short = True
        tests = {}
    half: dict[str, float] = {}
    rules: dict[str, str] = {}
    figures: dict[str, FigureResult] = {}
    for name, keys in (("headline", headline), ("detail", {f.key for f in figs} - headline)):
        bound = family_bound({k: t for k, t in tests.items() if k in keys}, level)
        if bound is None:
            continue
        half.update(bound.half)
        rules.update(dict.fromkeys(bound.half, bound.rule))
        if math.isfinite(bound.critical):
            method.family_critical[name] = bound.critical
        method.rule[name] = bound.rule
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
        if test is not None and width is not None and math.isfinite(width):
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
            res.p_value = p_value(test, rules[f.key])
        res.verdict = _verdict_of(f, res.significant, res.delta)  # type: ignore[assignment]
        if method.too_short and res.delta is not None:
            res.verdict = "cannot tell"
        if persistent and f.source in PAST_CAPACITY_UNTESTED and res.delta is not None:
            res.verdict = "past capacity"
        figures[f.key] = res
    return figures, method


def _warnings(out: PairComparison, wa: WindowedRun, wb: WindowedRun) -> list[str]:
    warns = [f"{d.text()}" for d in out.differences if d.severity in ("refuse", "warn")]
    if out.forced:
        warns.insert(0, "compared with --force although the runs are not comparable")
    m = out.method
    if not m.too_short and m.arrival_blocks < MIN_BLOCKS:
        warns.append(
            f"the runs' arrivals hold only {m.arrival_blocks} independent stretches of time "
            f"(blocks of {m.block_windows * m.window_s[0]:.1f} s, at least {LIFETIMES:g}× a "
            f"request's decode of {m.decode_s:.1f} s): only a difference that shows in nearly "
            f"every block can be called; run ≥ {m.needed_requests} requests "
            f"for {MIN_BLOCKS} blocks"
        )
    for side, w in (("A", wa), ("B", wb)):
        g = queue_growth(w)
        if g is not None and past_capacity(w):
            warns.append(
                f"run {side}: the queue grew through the run (median TTFT ×{g:.1f} from the first "
                "to the last quarter): the server was past its capacity, so its waits depend on "
                "the run's length and its realized arrivals"
                + (
                    "; with both runs past capacity, TTFT, TPOT, ITL, E2E and goodput are not "
                    "tested (throughput is)"
                    if side == "B" and past_capacity(wa) and past_capacity(wb)
                    else ""
                )
            )
    return warns


def needed_requests(wa: WindowedRun, wb: WindowedRun, span: int, block: int) -> int:
    """Requests each run would need for :data:`MIN_BLOCKS` blocks of ``block`` windows over
    its arrivals (``span`` windows of them now), at the same rate."""
    per_window = max(wa.requests, wb.requests) / max(span, 1)
    return math.ceil(per_window * MIN_BLOCKS * block)


def _verdict(out: PairComparison) -> str:
    m = out.method
    if m.too_short:
        block_s = m.block_windows * m.window_s[0]
        return (
            "cannot tell: the runs are too short for their requests' lifetime — their arrivals "
            f"hold {m.arrival_blocks} block(s) of {block_s:.1f} s ({LIFETIMES:g}× a request's "
            f"decode of {m.decode_s:.1f} s, so that one block's load is not the next one's) "
            f"where a verdict needs {MIN_VERDICT_BLOCKS}; run ≥ {m.needed_requests} requests "
            f"(≥ {MIN_BLOCKS * block_s:.0f} s of arrivals at this rate)"
        )
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
    return f"B differs from A: {'; '.join(parts)}"
