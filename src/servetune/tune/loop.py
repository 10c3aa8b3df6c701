"""The study's loop: the sampler's trials until ``--trials`` are launched or ``--time-budget``
is spent, with the last ``REFINE_SHARE`` of the budget kept for the local refinement around
the best (every one-knob neighbour not yet measured, climbing to one that beats it), then the
sampler again with what the refinement left; it stops early when the space is exhausted."""

from __future__ import annotations

import time
from collections.abc import Callable

import optuna

from servetune.results.tune_file import TrialRecord, TuneSpec
from servetune.tune.space import one_knob_moves, params_key
from servetune.tune.study import LAUNCHED, launched, records
from servetune.tune.trial import TrialRunner

STALE_AFTER = 200
"""Stop after this many trials in a row that measured nothing new (the space is exhausted)."""
REFINE_SHARE = 0.25
"""The share of ``--trials`` kept for the local refinement around the best."""


def stopper(
    spec: TuneSpec, t0: float, target: int | None = None
) -> Callable[[optuna.Study, optuna.trial.FrozenTrial], None]:
    """Stops the study when TARGET configurations (``--trials``) were launched, the time is
    up, or the space is exhausted (``STALE_AFTER`` trials in a row that measured nothing
    new)."""
    idle = {"n": 0}
    goal = spec.trials if target is None else target

    def cb(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        status = trial.user_attrs.get("status")
        idle["n"] = 0 if status in LAUNCHED else idle["n"] + 1
        if launched(study) >= goal or idle["n"] >= STALE_AFTER:
            study.stop()
        if _time_up(spec, t0):
            study.stop()

    return cb


def _time_up(spec: TuneSpec, t0: float) -> bool:
    return spec.time_budget_s is not None and time.monotonic() - t0 >= spec.time_budget_s


def refine_budget(spec: TuneSpec) -> int:
    """Launches kept for the local refinement: the last ``REFINE_SHARE`` of ``--trials``
    (none under ``pareto``, which has no single best to refine)."""
    return 0 if spec.objective == "pareto" else int(spec.trials * REFINE_SHARE)


def _run(
    study: optuna.Study,
    spec: TuneSpec,
    runner: TrialRunner,
    t0: float,
    target: int,
    n_trials: int | None = None,
) -> None:
    if launched(study) >= target or _time_up(spec, t0):
        return
    left = None if spec.time_budget_s is None else spec.time_budget_s - (time.monotonic() - t0)
    study.optimize(
        runner,
        n_trials=n_trials,
        timeout=left,
        callbacks=[stopper(spec, t0, target)],
        catch=(),
        gc_after_trial=False,
    )


def best_record(study: optuna.Study) -> TrialRecord | None:
    """The trial with the highest objective so far (the first of equals)."""
    ok = [r for r in records(study) if r.status == "ok" and r.value]
    return max(ok, key=lambda r: (r.value or 0.0, -r.number)) if ok else None


def refine(study: optuna.Study, spec: TuneSpec, runner: TrialRunner, t0: float) -> None:
    """The local refinement: every point one knob-step from the best so far that the study
    has not measured (the planner's rejects skipped) is run as a trial — the one that beats
    the best becomes the next to refine around — until none is left or ``--trials`` are
    launched. A sampler over a space of thousands of points can stop one step from a better
    configuration and never visit it; a neighbour that cannot win stops after its first
    misses at the best's rate (``find_slo_max``'s ``beat``), so a step costs a few probes."""
    if refine_budget(spec) == 0:
        return
    names = [d.name for d in spec.space.dims]
    tried: set[str] = set()
    while launched(study) < spec.trials and not _time_up(spec, t0):
        best = best_record(study)
        if best is None:
            return
        measured = {params_key(r.params) for r in records(study)}
        values = runner.backend.engine_values(best.config, names)
        moves = [
            m
            for m in one_knob_moves(spec.space, best.params, values)
            if params_key(m[3]) not in measured | tried
        ]
        if not moves:
            return
        for _knob, _value, _way, params in runner.by_promise(moves):
            if launched(study) >= spec.trials or _time_up(spec, t0):
                return
            tried.add(params_key(params))
            if runner.backend.screen(spec.space.config(params)) is not None:
                continue  # cannot start: nothing to learn by recording it again
            study.enqueue_trial(params, user_attrs={"role": "refine", "refined_from": best.number})
            _run(study, spec, runner, t0, spec.trials, n_trials=1)
            now = best_record(study)
            if now is not None and now.number != best.number:
                break  # climb from the new best


def optimize(study: optuna.Study, spec: TuneSpec, runner: TrialRunner) -> None:
    """Run trials until ``--trials`` are launched or ``--time-budget`` is spent (or Ctrl-C:
    the running trial fails, every finished one stays in the storage): the sampler's, then
    the local refinement around the best (:func:`refine`) with the last
    ``REFINE_SHARE`` of the budget, then the sampler again with what the refinement left."""
    t0 = time.monotonic()
    if launched(study) >= spec.trials:
        return
    _run(study, spec, runner, t0, spec.trials - refine_budget(spec))
    refine(study, spec, runner, t0)
    _run(study, spec, runner, t0, spec.trials)
