"""``tune`` from start to finish: the spec, the backend, the planner's screen of the whole
space, the study (new or resumed), the trials, the repeats, and the files:

``RESULT_DIR/tune.json``      the result (written after every trial, complete at the end)
``RESULT_DIR/trials.jsonl``   one line per finished trial, appended as each ends (kill-safe)
``RESULT_DIR/tune.db``        the Optuna study (SQLite; absent with --storage)
``RESULT_DIR/report.html``    the report (``servetune report`` draws it again from tune.json)
``RESULT_DIR/trials/NNNN/``   a real engine's log and each probe's run directory
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from servetune.errors import ConfigError, ServetuneError
from servetune.profiles import profile
from servetune.results.io import LineAppender, ensure_result_dir
from servetune.results.tune_file import (
    TRIALS_FILE,
    TrialRecord,
    TuneResult,
    TuneSpec,
    config_text,
    write_tune_result,
)
from servetune.tune.backends import Backend, EngineBackend, SimBackend
from servetune.tune.calibrating import Calibrating, calibrated_gpu, calibration_gain
from servetune.tune.finish import finish
from servetune.tune.loop import optimize
from servetune.tune.points import space_points
from servetune.tune.storage import open_storage, storage_url
from servetune.tune.study import (
    LAUNCHED,
    create_study,
    enqueue_warm_start,
    load_study,
    records,
)
from servetune.tune.trial import TrialRunner

WARM_START_TRIALS = 40
WARM_START_TOP = 3


def sim_backend_for(spec: TuneSpec) -> SimBackend | None:
    """The simulated engine for the spec's GPU and model, when its catalogs know them."""
    gpu = spec.sim_gpu or spec.gpu
    model = spec.sim_model or spec.model
    if not gpu:
        return None
    try:
        from servetune.arch.gpus import find_gpu
        from servetune.arch.models import find_model

        find_gpu(gpu)
        find_model(model)
    except ServetuneError:
        return None
    return SimBackend(gpu, model, spec.workload, spec.slos, spec.calibration)


def calibration_notes(spec: TuneSpec) -> list[str]:
    """``--calibration``'s notes for the study's reference configuration: where its constants
    are transferred (another GPU or model than the profile's) or extrapolated."""
    if spec.calibration is None:
        return []
    sim = sim_backend_for(spec)
    return sim.calibration_notes(spec.space.config(spec.reference_params())) if sim else []


def calibrating_for(
    spec: TuneSpec, out: Path, backend: Backend, echo: Callable[[str], None]
) -> Calibrating | None:
    """``--calibrate``'s refits for a real engine's study (None: not asked)."""
    if not spec.calibrate or not isinstance(backend, EngineBackend):
        return None
    catalog = backend.sim
    if catalog is None and (gpu := calibrated_gpu(spec)) is not None:
        try:
            from servetune.arch.cpu import find_device
            from servetune.arch.models import find_model

            find_device(gpu)
            find_model(spec.sim_model or spec.model)
            catalog = SimBackend(gpu, spec.sim_model or spec.model, spec.workload, spec.slos)
            backend.sim = catalog
        except ServetuneError as exc:
            echo(
                f"note: the simulator cannot predict {spec.model} ({exc.message}); "
                "--calibrate fits it from the first trials on"
            )
    return Calibrating(spec, out, backend, catalog, echo)


def make_backend(spec: TuneSpec) -> Backend:
    if profile(spec.engine).simulated and not spec.realtime:
        sim = sim_backend_for(spec)
        if sim is None:
            raise ConfigError(
                f"the simulated engine does not know GPU {spec.gpu!r} or model {spec.model!r}",
                hint="see `servetune sim gpus` and `servetune sim models`",
            )
        return sim
    options = dict(spec.engine_options)
    if profile(spec.engine).simulated:
        options.setdefault("gpu", spec.gpu)
    return EngineBackend(
        spec.engine,
        spec.model,
        spec.workload,
        spec.slos,
        options=options,
        gpus=spec.gpus,
        sim=sim_backend_for(spec),
        ready_timeout_s=spec.ready_timeout_s,
        warmup_requests=spec.warmup_requests,
    )


def screen_space(spec: TuneSpec, backend: Backend) -> tuple[int, int]:
    """Screen every point (or a sample of a large space) before anything launches; a space
    the planner rejects entirely is a ConfigError that says why. Returns (accepted, screened)."""
    rng = random.Random(spec.seed)
    points = space_points(spec, rng)
    reasons: dict[str, int] = {}
    accepted = 0
    for p in points:
        why = backend.screen(spec.space.config(p))
        if why is None:
            accepted += 1
        else:
            reasons[why] = reasons.get(why, 0) + 1
    if accepted == 0:
        common = sorted(reasons.items(), key=lambda kv: -kv[1])[:3]
        raise ConfigError.over_fields(
            f"the memory planner rejects every configuration of the space ({len(points)} "
            "screened, none launched): " + " | ".join(f"{why} (×{n})" for why, n in common),
            hint="widen the space ({knob}), lower max_model_len or the SLO's load, or use a "
            "GPU with more memory",
        )
    return accepted, len(points)


def warm_start(spec: TuneSpec, study: Any, echo: Callable[[str], None]) -> None:
    """Real engines: a quick search on the simulated engine; its best configurations are
    the first ones launched (after the default)."""
    sim = sim_backend_for(spec)
    if sim is None or profile(spec.engine).simulated or not spec.slos:
        return
    import optuna

    echo("warm start: searching the space on the simulated engine first")
    scored: list[tuple[float, dict[str, Any]]] = []
    local = optuna.create_study(
        direction="maximize", sampler=optuna.samplers.TPESampler(seed=spec.seed)
    )

    def objective(trial: optuna.Trial) -> float:
        params = {d.name: trial.suggest_categorical(d.name, d.values) for d in spec.space.dims}
        value = sim.predict(spec.space.config(params), spec.slos) or 0.0
        scored.append((value, params))
        return value

    local.optimize(objective, n_trials=min(WARM_START_TRIALS, spec.space.size()))
    seen: set[str] = set()
    top: list[dict[str, Any]] = []
    for value, params in sorted(scored, key=lambda x: -x[0]):
        key = repr(sorted(params.items(), key=lambda kv: kv[0]))
        if value > 0 and key not in seen:
            seen.add(key)
            top.append(params)
        if len(top) >= WARM_START_TOP:
            break
    enqueue_warm_start(study, top)


def trial_line(rec: TrialRecord) -> str:
    cfg = " ".join(f"{k}={v}" for k, v in rec.config.items()) or "(engine defaults)"
    if rec.status in ("ok", "duplicate") and rec.value is not None:
        what = f"{rec.value:.3g}"
    else:
        what = "–"
    tail = rec.reason or (f"limited by {rec.limiting}" if rec.limiting else "")
    return f"  trial {rec.number:>3} {rec.status:<9} {what:>8}  {cfg}" + (
        f"  [{tail}]" if tail else ""
    )


def run_tune(
    spec: TuneSpec,
    result_dir: Path,
    *,
    storage: str | None = None,
    study_name: str | None = None,
    resume: bool = False,
    echo: Callable[[str], None] = print,
    coordinate: bool = True,
) -> TuneResult:
    """Run (or resume) a study, then finish it (``coordinate``: repeats, OFAT, files)."""
    out = ensure_result_dir(result_dir)
    url = storage_url(out, storage)
    name = study_name or "servetune-tune"
    backend = make_backend(spec)
    accepted, screened = screen_space(spec, backend)
    echo(
        f"space: {len(spec.space.dims)} knobs, {spec.space.size()} configurations; the planner "
        f"accepts {accepted} of {screened} screened"
    )
    st = open_storage(url, spec.heartbeat_s)
    study, spec = create_study(spec, name, st, resume)
    backend = make_backend(spec)  # a resumed study keeps its own seeds
    fresh = len(study.trials) <= 1
    if fresh:
        warm_start(spec, study, echo)
    result = TuneResult(
        study=name, storage=url.split("@")[-1], spec=spec, warnings=calibration_notes(spec)
    )
    for line in result.warnings:
        echo(f"note: {line}")
    lines = LineAppender(out / TRIALS_FILE)

    def on_record(rec: TrialRecord) -> None:
        lines.write(orjson.dumps(rec.model_dump(mode="json")) + b"\n")
        echo(trial_line(rec))
        result.trials = records(study)
        write_tune_result(out, result)

    calibrating = calibrating_for(spec, out, backend, echo)

    def annotate(rec: TrialRecord) -> None:
        if calibrating is not None:
            calibrating.predict(rec)

    def on_trial(rec: TrialRecord) -> None:
        if calibrating is not None and rec.status in LAUNCHED and rec.probes:
            done = records(study)
            launched = 1 + sum(1 for r in done if r.status in LAUNCHED and r.probes)
            step = calibrating.refit(rec, launched, [r.params for r in done])
            enqueue_warm_start(study, step.enqueued, role="calibrated")
            result.calibration_steps = list(calibrating.steps)
        on_record(rec)
        if calibrating is not None:
            result.calibration_gain = calibration_gain(result.trials)
            write_tune_result(out, result)

    runner = TrialRunner(spec, backend, out, echo=echo, on_record=on_trial, annotate=annotate)
    try:
        optimize(study, spec, runner)
    except KeyboardInterrupt:
        result.trials = records(study)
        result.status = "interrupted"
        write_tune_result(out, result)
        raise
    finally:
        lines.close()
    result.trials = records(study)
    if coordinate:
        finish(result, backend, out, echo)
        write_tune_result(out, result)
        if spec.validate_top and spec.validate_engine and profile(spec.engine).simulated:
            validate(result, out, echo)
            write_tune_result(out, result)
        from servetune.report.tune_page import build_tune_report

        build_tune_report(out)
    return result


def validate(result: TuneResult, out: Path, echo: Callable[[str], None] = print) -> None:
    """``--validate-top K``: the K best configurations of a simulated search, each launched
    on the real engine and its SLO-max searched from the simulated one."""
    from servetune.results.tune_file import Validation
    from servetune.tune.backends import engine_error_reason
    from servetune.tune.search import find_slo_max, saturation_of

    spec = result.spec
    assert spec.validate_engine is not None
    options = dict(spec.engine_options)
    if profile(spec.validate_engine).simulated:
        options.setdefault("gpu", spec.gpu)
    real = EngineBackend(
        spec.validate_engine,
        spec.validate_model or spec.model,
        spec.workload,
        spec.slos,
        options=options,
        gpus=spec.gpus,
        ready_timeout_s=spec.ready_timeout_s,
        warmup_requests=spec.warmup_requests,
    )
    seen: set[str] = set()
    ranked = sorted(
        (t for t in result.trials if t.status == "ok" and t.value),
        key=lambda t: t.value or 0.0,
        reverse=True,
    )
    for t in ranked:
        key = repr(sorted(t.config.items()))
        if key in seen:
            continue
        seen.add(key)
        if len(seen) > spec.validate_top:
            break
        echo(f"validating on {spec.validate_engine}: {config_text(t.config)}")
        v = Validation(config=t.config, simulated=t.value)
        why = real.screen(t.config)
        if why is not None:
            v.status, v.reason = "rejected", why
        else:
            try:
                d = out / "validate" / f"{len(seen):02d}"
                with real.session(t.config, d) as measure:
                    res = find_slo_max(
                        measure,
                        t.value or 1.0,
                        max_probes=spec.probes,
                        tol=spec.tol,
                        saturation=saturation_of(measure),
                    )
                v.probes = res.probes
                v.measured = res.slo_max
                if res.error is not None:
                    v.status, v.reason = "failed", res.error
                elif res.slo_max is None:
                    v.status = "no-rate"
            except ServetuneError as exc:
                v.status, v.reason = "failed", engine_error_reason(exc)
        result.validation.append(v)


def run_worker(
    name: str,
    storage: str,
    result_dir: Path,
    gpus: list[str] | None = None,
    echo: Callable[[str], None] = print,
    trials: int | None = None,
    heartbeat_s: int = 10,
) -> list[TrialRecord]:
    """Join a study started elsewhere and run its trials on the GPUs given."""
    out = ensure_result_dir(result_dir)
    url = storage_url(out, storage)
    study, spec = load_study(name, open_storage(url, heartbeat_s))
    if gpus is not None:
        spec = spec.model_copy(update={"gpus": gpus})
    if trials is not None:
        spec = spec.model_copy(update={"trials": trials})
    backend = make_backend(spec)
    lines = LineAppender(out / TRIALS_FILE)

    def on_record(rec: TrialRecord) -> None:
        lines.write(orjson.dumps(rec.model_dump(mode="json")) + b"\n")
        echo(trial_line(rec))

    runner = TrialRunner(spec, backend, out, echo=echo, on_record=on_record)
    try:
        optimize(study, spec, runner)
    finally:
        lines.close()
    return records(study)
