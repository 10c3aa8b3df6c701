"""Everything a sweep concludes from its rows: the knee, the SLO-max, the warnings.

Only ``complete`` levels draw the curve's conclusions: a level that failed more requests than
``--max-failure-rate`` allows (degraded, failed), was interrupted or cut short describes only
the requests that happened to succeed, and would put a knee where the server was merely
refusing work. Those levels are shown, said, and left out — and a level where the server
started failing caps the SLO-max: no load at or above it can be said to meet the SLOs.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from servetune.results.sweep_schema import LevelRow, LoadMode, SloMax, SweepResult
from servetune.sweep import fmt
from servetune.sweep.knee import find_knee
from servetune.sweep.slo import apply_confirmation, find_slo_max, row_meets


def usable(row: LevelRow) -> bool:
    """Whether a level may draw the knee and the SLO-max."""
    return row.status == "complete"


def failing(row: LevelRow) -> bool:
    """A level where the server failed more requests than allowed (a level that failed with
    no failed request — its warm-up covered it, nothing ended — says nothing of the server)."""
    return row.status in ("degraded", "failed") and (
        row.failure_share is None or row.failure_share > 0
    )


def analyse(result: SweepResult) -> None:
    """Fill ``knee``, ``slo_max`` and ``warnings`` of a sweep from its rows (in place)."""
    cfg = result.config
    rows = result.rows
    good = [r for r in rows if usable(r)]
    result.knee = find_knee(good, cfg.mode, k=cfg.knee_k) if rows else None
    bad = [r for r in rows if not usable(r)]
    if result.knee is not None and bad:
        left = ", ".join(r.label for r in sorted(bad, key=lambda r: (r.load, r.label)))
        note = f"left out (not complete): {left}"
        result.knee.evidence.append(note)
        if not good:
            result.knee.verdict = (
                "No knee: no level completed without failures — "
                + failure_summary(bad)
                + ". Fix the failures before reading latencies."
            )
        else:
            result.knee.verdict = result.knee.verdict.rstrip(".") + f" ({note})."
    slo = cfg.bench.goodput
    unit = fmt.rate_unit(cfg.bench)
    main = [r for r in good if r.role != "confirm"]
    slo_max = find_slo_max(main, slo, cfg.mode, unit) if rows else None
    if slo_max is not None:
        slo_max = _capped_by_failures(
            slo_max, main, [r for r in rows if failing(r)], cfg.mode, unit
        )
    confirms = [r for r in good if r.role == "confirm"]
    if slo_max is not None and confirms and slo_max.status == "found":
        check = confirms[-1]
        if not row_meets(check, slo):
            # The interpolation was optimistic: the confirming level joins the curve.
            slo_max = find_slo_max(good, slo, cfg.mode, unit) or slo_max
        apply_confirmation(slo_max, check, slo, cfg.mode, unit)
    result.slo_max = slo_max
    result.warnings = [f"{r.label}: {w}" for r in result.measured_rows() for w in r.warnings]


def failure_summary(rows: Sequence[LevelRow]) -> str:
    """'3 levels failed (server_error 960, rate_limited 40)' for a person."""
    classes: Counter[str] = Counter()
    for r in rows:
        classes.update(r.error_classes)
    states = Counter(r.status for r in rows)
    what = ", ".join(f"{n} {s}" for s, n in states.most_common())
    why = ", ".join(f"{c} {n}" for c, n in classes.most_common())
    return f"levels {what}" + (f" ({why})" if why else "")


def _capped_by_failures(
    slo_max: SloMax,
    good: Sequence[LevelRow],
    failing_rows: Sequence[LevelRow],
    mode: LoadMode,
    rate_unit: str = "req/s",
) -> SloMax:
    """The SLO-max below the lowest load where the server failed too many requests."""
    if not failing_rows:
        return slo_max
    first = min(failing_rows, key=lambda r: r.load)
    limit = first.load
    within = slo_max.status == "all_meet" or (
        slo_max.status == "found" and slo_max.offered is not None and slo_max.offered >= limit
    )
    if not within:
        return slo_max
    below = [r for r in good if r.load < limit]
    share = f"{first.failure_share:.0%}" if first.failure_share is not None else "too many"
    why = (
        f"at {first.label} the server failed {share} of requests "
        f"({', '.join(f'{c} {n}' for c, n in first.error_classes.items()) or first.status})"
    )
    capped = find_slo_max(below, slo_max.slo, mode, rate_unit) if below else None
    if capped is None or capped.status == "insufficient":
        return SloMax(
            slo=slo_max.slo,
            status="none_meet",
            evidence=[why],
            verdict=f"No load can be said to meet the SLOs: {why}, and no lower level completed.",
        )
    if capped.status == "all_meet":
        top = max(below, key=lambda r: r.load)
        capped = SloMax(
            slo=slo_max.slo,
            status="found",
            offered=top.load,
            throughput=top.request_throughput,
            bracket=(top.label, first.label),
            evidence=[*capped.evidence, why],
            verdict=(
                f"Highest load meeting the SLOs: {fmt.load(top.load, mode, rate_unit)} "
                f"(≈{fmt.num(top.request_throughput)} req/s achieved), the highest level "
                f"before the server started failing requests — {why}."
            ),
        )
        return capped
    capped.evidence.append(why)
    if math.isfinite(limit):
        capped.verdict = capped.verdict.rstrip(".") + f"; {why}."
    return capped
