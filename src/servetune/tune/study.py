"""The search: an Optuna study over the space, one trial per configuration.

Storage is SQLite in the result directory by default (``tune.db``) or any SQLAlchemy URL
(``--storage postgresql://…``), always with heartbeats: a trial whose worker stopped beating
(killed, its host gone) is failed by the next worker that starts a trial and re-queued with
the same parameters (``RetryFailedTrialCallback``). The study carries its spec
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

import contextlib
import inspect
import os
import socket
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import optuna

from servetune.errors import ConfigError, ServetuneError
from servetune.metrics.slo_spec import MAX_FAILED_SHARE
from servetune.results.tune_file import DEFAULT, TrialRecord, TuneSpec
from servetune.tune.backends import Backend, engine_error_reason
from servetune.tune.search import find_slo_max, saturation_of
from servetune.tune.space import one_knob_moves

_Move = tuple[str, Any, str, dict[str, Any]]

DB_FILE = "tune.db"
HEARTBEAT_S = 10
MAX_RETRY = 2
PRUNE_BELOW = 0.6
"""A prediction below 60% of the best measured SLO-max prunes a real-engine trial."""
STALE_AFTER = 200
"""Stop after this many trials in a row that measured nothing new (the space is exhausted)."""
LAUNCHED = ("ok", "no-rate", "failed", "pruned")
REFINE_SHARE = 0.25
"""The share of ``--trials`` kept for the local refinement around the best."""
FIRST_START = 0.7
"""No prediction and no best yet: the search starts at 70% of the saturation throughput."""
FAR_MS = 1e9
"""Pareto latency of a configuration that could not be measured."""

optuna.logging.set_verbosity(optuna.logging.WARNING)


def storage_url(result_dir: Path, storage: str | None) -> str:
    if storage:
        if storage.startswith("postgresql://") or storage.startswith("postgres://"):
            # psycopg 3 is the driver servetune installs
            return "postgresql+psycopg://" + storage.split("://", 1)[1]
        return storage
    return f"sqlite:///{(result_dir / DB_FILE).resolve()}"


def grace_for(heartbeat_s: int) -> int:
    """How long a trial may go without a heartbeat before it counts as dead."""
    return max(3 * heartbeat_s, heartbeat_s + 5)


def open_storage(url: str, heartbeat_s: int = HEARTBEAT_S) -> optuna.storages.RDBStorage:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        warnings.simplefilter("ignore", FutureWarning)
        cls = getattr(optuna.storages, "RetryHeartbeatStaleTrialCallback", None)
        retry = (cls or optuna.storages.RetryFailedTrialCallback)(max_retry=MAX_RETRY)
    kwargs: dict[str, Any] = {
        "heartbeat_interval": heartbeat_s,
        "grace_period": grace_for(heartbeat_s),
    }
    params = inspect.signature(optuna.storages.RDBStorage.__init__).parameters
    if "heartbeat_stale_trial_callback" in params:
        kwargs["heartbeat_stale_trial_callback"] = retry
    else:  # pragma: no cover - older Optuna
        kwargs["failed_trial_callback"] = retry
    engine_kwargs: dict[str, Any] = {}
    if url.startswith("sqlite"):
        engine_kwargs = {"connect_args": {"timeout": 60}}
    try:
        with warnings.catch_warnings():
            # heartbeats are "experimental" in Optuna's words; they are what re-queues the
            # trial of a worker that died
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs or None, **kwargs)
    except Exception as exc:  # SQLAlchemy: the database cannot be reached or opened
        # SQLAlchemy's text runs over lines ([SQL: …], a link): the first says what is wrong
        said = (str(exc).splitlines() or [exc.__class__.__name__])[0]
        sqlite = url.startswith("sqlite:")
        raise ConfigError(
            f"cannot open the study storage {url.split('@')[-1]}: {said}",
            hint="the study's database file looks damaged: choose another --result-dir, or "
            "move the file aside to start the study afresh"
            if sqlite
            else "check --storage (postgresql://USER@HOST:PORT/DB) and that the server runs",
        ) from exc


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
        raise ConfigError(
            f"a study named {name!r} already exists in this storage",
            hint="pass --resume to continue it, or choose another --study / --result-dir",
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
            raise ConfigError(
                f"cannot resume study {name!r}: it was started with other settings",
                hint="resume with the same flags (only --trials and --time-budget may change)",
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
        raise ConfigError(
            f"no study named {name!r} in this storage",
            hint=f"studies there: {', '.join(sorted(names)) or 'none'}; start it with "
            "servetune tune … --storage URL --study NAME",
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


def enqueue_warm_start(study: optuna.Study, params: list[dict[str, Any]]) -> None:
    for p in params:
        study.enqueue_trial(p, user_attrs={"role": "warm-start"}, skip_if_exists=True)


class TrialRunner:
    """Runs one trial: screen, predict, launch, search the SLO-max rate, record."""

    def __init__(
        self,
        spec: TuneSpec,
        backend: Backend,
        result_dir: Path,
        worker: str | None = None,
        echo: Callable[[str], None] = print,
        on_record: Callable[[TrialRecord], None] | None = None,
    ) -> None:
        self.spec = spec
        self.backend = backend
        self.result_dir = result_dir
        self.worker = worker or f"{socket.gethostname()}:{os.getpid()}"
        self.echo = echo
        self.on_record = on_record
        self.predictions: dict[str, float | None] = {}

    def _key(self, params: dict[str, Any]) -> str:
        return repr(sorted((k, repr(v)) for k, v in params.items()))

    def _duplicate(self, study: optuna.Study, params: dict[str, Any]) -> TrialRecord | None:
        key = self._key(params)
        for r in records(study):
            if r.status != "duplicate" and self._key(r.params) == key:
                return r
        return None

    def by_promise(self, moves: list[_Move]) -> list[_Move]:
        """MOVES, the most promising first by the simulated engine's prediction of their
        SLO-max, when it has one (the refinement may not have the budget for all)."""
        if self.spec.objective != "slo-max" or not self.spec.slos:
            return moves
        scores = []
        for m in moves:
            with contextlib.suppress(ServetuneError):
                scores.append(self.backend.predict(self.spec.space.config(m[3]), self.spec.slos))
                continue
            scores.append(None)
        order = sorted(range(len(moves)), key=lambda i: -(scores[i] or 0.0))
        return [moves[i] for i in order]

    def _values(self, rec: TrialRecord) -> float | tuple[float, float]:
        v = rec.value if rec.value is not None else 0.0
        if self.spec.objective == "pareto":
            lat = rec.p99_latency_ms if rec.p99_latency_ms is not None else FAR_MS
            return (v, lat)
        return v

    def __call__(self, trial: optuna.Trial) -> float | tuple[float, float]:
        space = self.spec.space
        params = {d.name: trial.suggest_categorical(d.name, d.values) for d in space.dims}
        config = space.config(params)
        t0 = time.monotonic()
        rec = TrialRecord(
            number=trial.number,
            params=params,
            config=config,
            status="ok",
            worker=self.worker,
            role=trial.user_attrs.get("role"),
            refined_from=trial.user_attrs.get("refined_from"),
        )
        dup = self._duplicate(trial.study, params)
        if dup is not None:
            rec = dup.model_copy(
                update={
                    "number": trial.number,
                    "status": "duplicate",
                    "reason": f"same as trial {dup.number}",
                    "probes": [],
                    "worker": self.worker,
                    "duration_s": 0.0,
                    "role": rec.role,
                    "refined_from": rec.refined_from,
                }
            )
            rec.value = dup.value
        else:
            self._run(trial, rec)
        rec.duration_s = time.monotonic() - t0
        trial.set_user_attr("record", rec.model_dump_json())
        trial.set_user_attr("status", rec.status)
        if self.on_record is not None:
            self.on_record(rec)
        return self._values(rec)

    def _run(self, trial: optuna.Trial, rec: TrialRecord) -> None:
        spec = self.spec
        reason = self.backend.screen(rec.config)
        if reason is not None:
            rec.status, rec.reason, rec.value = "rejected", reason, 0.0
            return
        # the reference is measured whole: the gain over it is the result's headline
        reference = self._key(rec.params) == self._key(spec.reference_params())
        best = best_value(trial.study)
        predicted = None
        if spec.launches:  # offline, the search is itself the simulated engine's figure
            with contextlib.suppress(ServetuneError):
                predicted = self.backend.predict(rec.config, spec.slos) if spec.slos else None
        rec.predicted = predicted
        if (
            spec.launches
            and predicted is not None
            and best is not None
            and not reference
            and predicted < PRUNE_BELOW * best
        ):
            rec.status = "pruned"
            rec.reason = (
                f"the simulated engine predicts {predicted:.3g} req/s, under "
                f"{PRUNE_BELOW:.0%} of the best so far ({best:.3g}): not launched"
            )
            rec.value = predicted
            return
        trial_dir = self.result_dir / "trials" / f"{trial.number:04d}"
        try:
            with self.backend.session(rec.config, trial_dir) as measure:
                if spec.objective == "slo-max":
                    self._search(rec, measure, predicted, best, beat=not reference)
                else:
                    self._single(rec, measure)
        except ServetuneError as exc:
            rec.status, rec.reason, rec.value = "failed", engine_error_reason(exc), 0.0

    def _search(
        self,
        rec: TrialRecord,
        measure: Any,
        predicted: float | None,
        best: float | None,
        beat: bool = True,
    ) -> None:
        """BEAT: stop as soon as it shows it cannot beat the best so far (not the reference:
        it is measured whole)."""
        spec = self.spec
        # every request at once first: the SLO-max search stays below what it completes
        sat = saturation_of(measure)
        rec.saturation = sat
        start = predicted or best or (FIRST_START * sat if sat else 1.0)
        out = find_slo_max(
            measure,
            max(start, 0.05),
            max_probes=spec.probes,
            tol=spec.tol,
            beat=best if spec.launches and beat else None,
            saturation=sat,
        )
        rec.probes = out.probes
        rec.slo_max, rec.upper, rec.limiting = out.slo_max, out.upper, out.limiting
        if out.error is not None:
            rec.status, rec.reason, rec.value = "failed", out.error, 0.0
            return
        rec.value = out.slo_max or 0.0
        at = next((p for p in out.probes if p.rate == out.slo_max), None)
        if at is not None:
            rec.throughput = at.figures.get("request_throughput")
            rec.p99_latency_ms = at.figures.get("p99_e2el_ms")
        if out.pruned:  # before no-rate: a miss at the rate to beat says nothing lower
            rec.status = "pruned"
            rec.reason = (
                f"stopped early: it missed the SLOs at {out.upper:.3g} req/s, at or below the "
                f"best so far ({best:.3g}): it cannot win"
                if out.upper is not None and best is not None
                else "stopped early: its SLO-max lies below the best so far"
            )
        elif out.slo_max is None:
            rec.status = "no-rate"
            lowest = min(out.probes, key=lambda p: p.rate) if out.probes else None
            if lowest is not None:
                rec.limiting = lowest.limiting

    def _single(self, rec: TrialRecord, measure: Any) -> None:
        """goodput / throughput / pareto: one run at the workload's own rate."""
        p = measure(self.spec.workload.request_rate)
        rec.probes = [p]
        if p.error is not None:
            rec.status, rec.reason, rec.value = "failed", p.error, 0.0
            return
        rec.throughput = p.figures.get("output_throughput")
        rec.p99_latency_ms = p.figures.get("p99_e2el_ms")
        if p.failed_share > MAX_FAILED_SHARE:
            # as for the SLO-max: its throughput counts only the requests that succeeded
            rec.status, rec.value = "no-rate", 0.0
            rec.reason = (
                f"{p.failed_share:.0%} of the requests failed (more than "
                f"{MAX_FAILED_SHARE:.0%}): a configuration that errors under load serves nobody"
            )
            rec.limiting = p.limiting
            return
        if self.spec.objective == "goodput":
            rec.value = p.figures.get("request_goodput") or 0.0
        else:
            rec.value = p.figures.get("output_throughput") or 0.0
        rec.limiting = p.limiting


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
        measured = {runner._key(r.params) for r in records(study)}
        values = runner.backend.engine_values(best.config, names)
        moves = [
            m
            for m in one_knob_moves(spec.space, best.params, values)
            if runner._key(m[3]) not in measured | tried
        ]
        if not moves:
            return
        for _knob, _value, _way, params in runner.by_promise(moves):
            if launched(study) >= spec.trials or _time_up(spec, t0):
                return
            tried.add(runner._key(params))
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


@contextlib.contextmanager
def quiet_optuna() -> Iterator[None]:
    level = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    try:
        yield
    finally:
        optuna.logging.set_verbosity(level)


__all__ = ["DEFAULT", "TrialRunner", "create_study", "load_study", "open_storage"]
