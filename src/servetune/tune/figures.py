"""What a configuration's figure is after the search: the median of its repeats (its one
measurement when not repeated), no higher than the rate it held on the longer check; and the
score the best is chosen by (median − k·MAD)."""

from __future__ import annotations

from servetune.results.tune_file import Confirmation, Repeat, TrialRecord, TuneResult
from servetune.tune.space import params_key


def repeat_of(result: TuneResult, trial: TrialRecord | None) -> Repeat | None:
    if trial is None:
        return None
    return next(
        (r for r in result.repeats if params_key(r.params) == params_key(trial.params)), None
    )


def confirmation_of(result: TuneResult, trial: TrialRecord | None) -> Confirmation | None:
    if trial is None:
        return None
    return next(
        (c for c in result.confirmations if params_key(c.params) == params_key(trial.params)), None
    )


def value_of(result: TuneResult, trial: TrialRecord | None) -> float | None:
    """A configuration's objective: the median of its repeats, or its one measurement — no
    higher than the rate it held on the longer probe, when it was checked there."""
    if trial is None:
        return None
    rep = repeat_of(result, trial)
    if rep is not None and rep.median:
        v: float | None = rep.median
    else:
        v = trial.value if trial.status == "ok" else None
    conf = confirmation_of(result, trial)
    if v is not None and conf is not None and conf.sustained is not None:
        v = min(v, conf.sustained)
    return v


def score_of(result: TuneResult, rep: Repeat | None, trial: TrialRecord) -> float:
    """What the best is chosen by: median − k·MAD of its repeats (its one measurement when
    not repeated), no higher than what it held on the longer probe (0 when the engine failed
    there)."""
    base = rep.score if rep is not None and rep.score is not None else (trial.value or 0.0)
    conf = confirmation_of(result, trial)
    if conf is not None:
        base = min(base, conf.sustained or 0.0)
    return base
