"""The search: an Optuna study over the space, one trial per configuration
(:mod:`~servetune.tune.trial`), run by :mod:`~servetune.tune.loop`, in a storage with
heartbeats (:mod:`~servetune.tune.storage`). The study carries its spec
(``user_attrs['spec']``), so ``servetune tune worker --study NAME --storage URL`` needs
nothing else; each finished trial carries its record (``user_attrs['record']``), so any host
can write the results.

Sampler: TPE (multivariate, seeded) for one objective, NSGA-II for ``--objective pareto``.
The reference is enqueued first — ``--baseline``'s configuration, or the engine's default —
so the gain over it is measured in the same study, and it is never pruned (it is measured
whole whatever the best so far); with a simulated engine at hand the best configurations it
predicts follow (warm start). A configuration the memory planner rejects scores 0 without a
launch, a failed one scores 0 with the engine's log line — the sampler learns the region to
avoid.
"""

from __future__ import annotations

from typing import Any, Literal

import optuna

from servetune.errors import ConfigError
from servetune.results.tune_file import DEFAULT, TrialRecord, TuneSpec

optuna.logging.set_verbosity(optuna.logging.WARNING)

LAUNCHED = ("ok", "no-rate", "failed", "pruned")


def sampler_for(spec: TuneSpec) -> optuna.samplers.BaseSampler:
    if spec.objective == "pareto":
        return optuna.samplers.NSGAIISampler(seed=spec.seed, population_size=8)
    return optuna.samplers.TPESampler(
        seed=spec.seed, multivariate=True, n_startup_trials=6, constant_liar=True
    )


def _comparable(spec: TuneSpec) -> dict[str, Any]:
    """What must match to resume: everything but the budget and the seeds (a seed left to
    chance is drawn anew by every command line)."""
    d = spec.model_dump(exclude={"trials", "time_budget_s", "seed"})
    d["workload"].pop("seed", None)
    return d


def create_study(
    spec: TuneSpec, name: str, storage: optuna.storages.RDBStorage, resume: bool
) -> tuple[optuna.Study, TuneSpec]:
    """A new study holding SPEC, or the existing one with that name when resuming (then its
    own spec, with SPEC's budget)."""
    directions: list[Literal["minimize", "maximize"]] = (
        ["maximize", "minimize"] if spec.objective == "pareto" else ["maximize"]
    )
    exists = name in {s.study_name for s in optuna.get_all_study_summaries(storage)}
    if exists and not resume:
        raise ConfigError.over_fields(
            f"a study named {name!r} already exists in this storage",
            hint="give {resume} to continue it, or choose another {study} / {result_dir}",
        )
    study = optuna.create_study(
        storage=storage,
        study_name=name,
        directions=directions,
        sampler=sampler_for(spec),
        load_if_exists=True,
    )
    if exists:
        old = TuneSpec.model_validate_json(study.user_attrs["spec"])
        if _comparable(old) != _comparable(spec):
            raise ConfigError.over_fields(
                f"cannot resume study {name!r}: it was started with other settings",
                hint="resume with the same settings (only {trials} and {time_budget} may change)",
            )
        spec = old.model_copy(update={"trials": spec.trials, "time_budget_s": spec.time_budget_s})
        study.set_user_attr("spec", spec.model_dump_json())
        return study, spec
    study.set_user_attr("spec", spec.model_dump_json())
    if spec.baseline is not None:
        study.enqueue_trial(spec.reference_params(), user_attrs={"role": "baseline"})
    elif all(DEFAULT in d.values for d in spec.space.dims):
        study.enqueue_trial(spec.space.default_params(), user_attrs={"role": "default"})
    return study, spec


def load_study(name: str, storage: optuna.storages.RDBStorage) -> tuple[optuna.Study, TuneSpec]:
    """An existing study and its spec (for ``tune worker``)."""
    names = {s.study_name for s in optuna.get_all_study_summaries(storage)}
    if name not in names:
        raise ConfigError.over_fields(
            f"no study named {name!r} in this storage",
            hint=f"studies there: {', '.join(sorted(names)) or 'none'}; start it with a tune "
            "given this {storage} and {study}",
        )
    probe = optuna.load_study(study_name=name, storage=storage)
    spec = TuneSpec.model_validate_json(probe.user_attrs["spec"])
    study = optuna.load_study(study_name=name, storage=storage, sampler=sampler_for(spec))
    return study, spec


def record_of(t: optuna.trial.FrozenTrial) -> TrialRecord | None:
    raw = t.user_attrs.get("record")
    return TrialRecord.model_validate_json(raw) if raw else None


def records(study: optuna.Study) -> list[TrialRecord]:
    out = []
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        rec = record_of(t)
        if rec is not None:
            out.append(rec)
    return sorted(out, key=lambda r: r.number)


def best_value(study: optuna.Study) -> float | None:
    vals = [r.value for r in records(study) if r.status == "ok" and r.value]
    return max(vals) if vals else None


def launched(study: optuna.Study) -> int:
    return sum(1 for r in records(study) if r.status in LAUNCHED)


def enqueue_warm_start(
    study: optuna.Study, params: list[dict[str, Any]], role: str = "warm-start"
) -> None:
    """Queue PARAMS next (their trials' role: ROLE), each once."""
    for p in params:
        study.enqueue_trial(p, user_attrs={"role": role}, skip_if_exists=True)
