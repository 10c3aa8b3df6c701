"""Repeats: each of the best configurations has its SLO-max rate searched again with other
draws of the workload (seed + r·``REPEAT_SEED_STEP``); they are ranked by ``median − k·MAD``
(MAD: the median absolute deviation from the median), so a configuration that wins once by
luck does not beat one that is steadily good; one whose repeats spread more than
``unstable_spread`` of their median ((max − min) / median) is flagged *unstable*. Each draw's
worst SLO / limit at the first SLO-max is kept: the draw-to-draw noise the longer check
weighs a margin against (:mod:`servetune.tune.confirm`)."""

from __future__ import annotations

import statistics
from pathlib import Path

from servetune.errors import ServetuneError
from servetune.results.tune_file import Probe, Repeat, TrialRecord, TuneSpec
from servetune.tune.backends import Backend, engine_error_reason
from servetune.tune.search import find_slo_max

REPEAT_SEED_STEP = 1009


def repeat_config(
    spec: TuneSpec,
    backend: Backend,
    rec: TrialRecord,
    out_dir: Path,
) -> Repeat:
    values: list[float | None] = [rec.slo_max]
    edge = [p.worst_ratio for p in probes_at(rec.probes, rec.slo_max)[:1]]
    note = ""
    for r in range(1, spec.repeats):
        seed = spec.workload.seed + r * REPEAT_SEED_STEP
        try:
            with backend.session(rec.config, out_dir / f"r{r}", seed=seed) as measure:
                res = find_slo_max(
                    measure,
                    rec.slo_max or 1.0,
                    max_probes=spec.probes,
                    tol=spec.tol,
                    saturation=rec.saturation,
                )
        except ServetuneError as exc:
            values.append(None)
            note = engine_error_reason(exc)
            continue
        edge += [p.worst_ratio for p in probes_at(res.probes, rec.slo_max)[:1]]
        if res.error is not None:
            values.append(None)
            note = res.error
        else:
            values.append(res.slo_max or 0.0)
    got = [v for v in values if v is not None]
    rep = Repeat(params=rec.params, config=rec.config, values=values, note=note)
    rep.edge_ratios = [e for e in edge if e is not None]
    if got:
        med = statistics.median(got)
        mad = statistics.median(abs(v - med) for v in got)
        rep.median, rep.mad = med, mad
        rep.score = med - spec.mad_k * mad
        spread = (max(got) - min(got)) / med if med > 0 else 0.0
        rep.unstable = spread > spec.unstable_spread or len(got) < len(values)
        if rep.unstable and not note:
            note = f"repeats spread {spread:.0%} of their median"
        rep.note = note
    return rep


def probes_at(probes: list[Probe], rate: float | None) -> list[Probe]:
    """The probes measured at RATE (each repeat's search starts at the first SLO-max)."""
    return [p for p in probes if rate is not None and p.rate == rate and p.error is None]
