"""Everything a sweep concludes from its rows: the knee, the SLO-max, the warnings."""

from __future__ import annotations

from servetune.results.sweep_schema import SweepResult
from servetune.sweep.knee import find_knee
from servetune.sweep.slo import apply_confirmation, find_slo_max, row_meets


def analyse(result: SweepResult) -> None:
    """Fill ``knee``, ``slo_max`` and ``warnings`` of a sweep from its rows (in place)."""
    cfg = result.config
    rows = result.rows
    result.knee = find_knee(rows, cfg.mode, k=cfg.knee_k) if rows else None
    slo = cfg.bench.goodput
    main = [r for r in rows if r.role != "confirm"]
    slo_max = find_slo_max(main, slo, cfg.mode) if main else None
    confirms = [r for r in rows if r.role == "confirm"]
    if slo_max is not None and confirms and slo_max.status == "found":
        check = confirms[-1]
        if not row_meets(check, slo):
            # The interpolation was optimistic: the confirming level joins the curve.
            slo_max = find_slo_max(rows, slo, cfg.mode) or slo_max
        apply_confirmation(slo_max, check, slo, cfg.mode)
    result.slo_max = slo_max
    result.warnings = [f"{r.label}: {w}" for r in result.measured_rows() for w in r.warnings]
