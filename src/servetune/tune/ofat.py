"""One knob at a time (the seed's step 4): from the winner, each searched knob one step down and
one step up its grid, alone, measured at the rate the winner held in every repeat: P50/P99
TTFT and TPOT, tok/s, KV-cache and GPU use, and whether the SLOs still hold; a neighbour
with clearly more room that the study never searched is named in a warning."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from servetune.errors import ServetuneError
from servetune.results.tune_file import OfatRow, TrialRecord, TuneResult, TuneSpec
from servetune.tune.backends import Backend, engine_error_reason
from servetune.tune.space import one_knob_moves, params_key

HEADROOM = "slo_worst_ratio"
"""A one-knob row's figure: its SLO nearest the limit, as a share of it."""


ROOMIER = 0.8
"""A neighbour whose worst SLO is under 80% of the best's, at the best's rate, may serve more."""


def ofat(
    spec: TuneSpec,
    backend: Backend,
    best: TrialRecord,
    rate: float,
    out_dir: Path,
    echo: Callable[[str], None] = lambda _m: None,
) -> list[OfatRow]:
    rows: list[OfatRow] = []

    def measure_one(params: dict[str, Any], knob: str, value: Any, direction: str) -> None:
        config = spec.space.config(params)
        row = OfatRow(knob=knob, value=value, direction=direction)  # type: ignore[arg-type]
        reason = backend.screen(config)
        if reason is not None:
            row.status = f"rejected: {reason}"
            rows.append(row)
            return
        sub = out_dir / f"{knob}-{direction}"
        try:
            with backend.session(config, sub, server_metrics=True) as measure:
                p = measure(rate)
        except ServetuneError as exc:
            row.status = f"failed: {engine_error_reason(exc)}"
            rows.append(row)
            return
        if p.error is not None:
            row.status = f"failed: {p.error}"
        else:
            row.status = "meets SLOs" if p.meets else f"misses: {p.limiting}"
            row.figures = dict(p.figures)
            # the SLO nearest its limit, as a share of it: the row's headroom
            row.figures[HEADROOM] = p.worst_ratio
        rows.append(row)

    todo: list[tuple[dict[str, Any], str, Any, str]] = [(best.params, "—", "", "best")]
    names = [d.name for d in spec.space.dims]
    values = backend.engine_values(best.config, names)
    for knob, value, direction, params in one_knob_moves(spec.space, best.params, values):
        todo.append((params, knob, value, direction))
    for i, (params, knob, value, direction) in enumerate(todo, 1):
        measure_one(params, knob, value, direction)
        name = "best" if direction == "best" else f"{knob}={value}"
        echo(f"  {i}/{len(todo)} {name}: {rows[-1].status}")
    return rows


def roomier_neighbours(result: TuneResult, best: TrialRecord) -> list[str]:
    """One-knob neighbours of the best that met the SLOs at its rate with clearly more room
    (their worst SLO under ``ROOMIER`` of the best's) and that the study never searched (the
    local refinement ran out of trials): they may serve more — said, not hidden."""
    rows = result.ofat
    mine = next((o for o in rows if o.direction == "best"), None)
    ratio = mine.figures.get(HEADROOM) if mine is not None else None
    if not ratio:
        return []
    searched = {params_key(t.params) for t in result.trials if t.status != "rejected"}
    out = []
    for o in rows:
        theirs = o.figures.get(HEADROOM)
        if o.direction == "best" or o.status != "meets SLOs" or theirs is None:
            continue
        if params_key({**best.params, o.knob: o.value}) in searched or theirs >= ROOMIER * ratio:
            continue
        out.append(
            f"{o.knob}={o.value} (one knob from the best) met the SLOs at "
            f"{result.ofat_rate or 0:.3g} req/s with its worst SLO at {theirs:.0%} of the limit "
            f"against the best's {ratio:.0%}, and was not searched: it may serve more (run tune "
            f"again with --baseline set to the best, or more --trials)"
        )
    return out
