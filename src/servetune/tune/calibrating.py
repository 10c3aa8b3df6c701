"""``tune --calibrate``: a real engine's trials calibrate the simulator as they go.

After each launched trial, the simulator is refitted (:func:`servetune.calibrate.calibrate`,
nothing held out: every probe informs the fit) on the probe runs of every launched trial so
far, each identified by the command its engine started with. The profile then predicts the
next trials — their SLO-max search starts there and a hopeless one is pruned, as the
catalog's prediction did before — and the configurations it ranks best among those not yet
tried are queued next. What it bought is measured on the trials a profile predicted before
they ran: the calibrated prediction's error against the catalog's on the same trials
(:class:`~servetune.results.tune_file.CalibrationGain`).
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from servetune.errors import ServetuneError
from servetune.results.calibration_file import write_calibration
from servetune.results.tune_file import (
    CALIBRATION_PROFILE,
    CalibrationGain,
    CalibrationStep,
    TrialRecord,
    TuneSpec,
)
from servetune.tune.backends import EngineBackend, SimBackend
from servetune.tune.points import space_points

MIN_RUNS = 2
"""Probe runs a refit needs (one run identifies no line)."""
QUEUED = 2
"""Untried configurations the calibrated simulator queues after each refit."""
CANDIDATES = 48
"""Untried configurations it ranks after each refit, from a seeded draw of the space
(tune/points.py) of at most four times as many."""


def calibrated_gpu(spec: TuneSpec) -> str | None:
    """The device the simulator runs the engine's trials on: ``--gpu``, else this machine's
    CPU for an engine whose build runs on it (``cpu:N`` with its threads)."""
    from servetune.profiles import profile

    if spec.gpu:
        return spec.gpu
    if profile(spec.engine).host_cpu:
        threads = spec.engine_options.get("threads")
        return f"cpu:{threads}" if threads else "cpu"
    return None


class Calibrating:
    """The refits of one study, and the simulators they make."""

    def __init__(
        self,
        spec: TuneSpec,
        out: Path,
        backend: EngineBackend,
        catalog: SimBackend | None,
        echo: Callable[[str], None] = print,
    ) -> None:
        self.spec, self.out, self.backend, self.catalog, self.echo = (
            spec,
            out,
            backend,
            catalog,
            echo,
        )
        self.steps: list[CalibrationStep] = []
        self.fitted_on = 0
        """Launched trials behind the current profile (0: the catalog predicts)."""

    def predict(self, rec: TrialRecord) -> None:
        """Note on REC the catalog's prediction beside the calibrated one it carries."""
        if self.fitted_on and self.catalog is not None and self.spec.slos:
            try:
                rec.predicted_catalog = self.catalog.predict(rec.config, self.spec.slos)
            except ServetuneError:
                rec.predicted_catalog = None
            rec.calibrated_on = self.fitted_on

    def refit(
        self, rec: TrialRecord, launched: int, tried: Sequence[dict[str, Any]]
    ) -> CalibrationStep:
        """Fit the simulator on every launched trial's probes so far (after REC); on success
        the engine backend predicts with it. Returns the step (its error when it failed)."""
        from servetune.calibrate import calibrate

        t0 = time.monotonic()
        step = CalibrationStep(after_trial=rec.number, trials=launched, runs=0)
        from servetune.profiles import profile

        on_cpu = profile(self.spec.engine).host_cpu
        try:
            prof = calibrate(
                [self.out],
                gpu="cpu" if on_cpu and not self.spec.gpu else self.spec.gpu,
                model=self.spec.sim_model,
                holdout="none",
                name=f"tune-{self.out.name}",
                max_evaluations=20,
            )
        except ServetuneError as exc:
            step.error = exc.message
            step.seconds = time.monotonic() - t0
            self.steps.append(step)
            self.echo(f"  calibrate: not refitted after trial {rec.number}: {exc.message}")
            return step
        write_calibration(self.out / CALIBRATION_PROFILE, prof)
        cal = prof.calibration
        dep = cal.deployment
        sim = SimBackend(dep.device.name, dep.model, self.spec.workload, self.spec.slos, cal)
        self.backend.sim = sim
        self.fitted_on = launched
        step.runs = sum(1 for e in prof.evidence if e.used)
        step.constants = dict(cal.constants)
        step.enqueued = self._ranked(sim, tried)
        step.seconds = time.monotonic() - t0
        self.steps.append(step)
        consts = ", ".join(f"{k}={v:.3g}" for k, v in cal.constants.items() if isinstance(v, float))
        self.echo(
            f"  calibrate: refitted on {step.runs} probe runs of {launched} trial(s) in "
            f"{step.seconds:.0f} s ({consts})"
        )
        return step

    def _ranked(self, sim: SimBackend, tried: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """The untried points the calibrated simulator predicts best (at most QUEUED)."""
        seen = {repr(sorted(p.items())) for p in tried}
        # a seeded draw of the space, another per refit: not the product's first points
        rng = random.Random(self.spec.seed * 7919 + len(tried))
        points = space_points(self.spec, rng)
        rng.shuffle(points)
        scored: list[tuple[float, dict[str, Any]]] = []
        for p in points[: CANDIDATES * 4]:  # a prediction is a simulation: bounded
            key = repr(sorted(p.items()))
            if key in seen:
                continue
            seen.add(key)
            value = sim.predict(self.spec.space.config(p), self.spec.slos)
            if value:
                scored.append((value, p))
            if len(scored) >= CANDIDATES:
                break
        scored.sort(key=lambda x: -x[0])
        return [p for _, p in scored[:QUEUED]]


def _agreement(pred: list[float], meas: list[float]) -> float | None:
    pairs = [
        (i, j) for i in range(len(meas)) for j in range(i + 1, len(meas)) if meas[i] != meas[j]
    ]
    if not pairs:
        return None
    same = sum(1 for i, j in pairs if (pred[i] - pred[j]) * (meas[i] - meas[j]) > 0)
    return same / len(pairs)


def calibration_gain(trials: Sequence[TrialRecord]) -> CalibrationGain | None:
    """The calibrated predictions against the catalog's on the trials a profile predicted
    before they ran and that were then measured (SLO-max found)."""
    rows = [
        t
        for t in trials
        if t.calibrated_on and t.status == "ok" and t.slo_max and t.predicted is not None
    ]
    if not rows:
        return None
    meas = [float(t.slo_max or 0.0) for t in rows]
    cal = [float(t.predicted or 0.0) for t in rows]
    cat_rows = [t for t in rows if t.predicted_catalog is not None]
    cat = [float(t.predicted_catalog or 0.0) for t in cat_rows]
    cat_meas = [float(t.slo_max or 0.0) for t in cat_rows]
    return CalibrationGain(
        trials=len(rows),
        calibrated_error=statistics.median(abs(p - m) / m for p, m in zip(cal, meas, strict=True)),
        catalog_error=(
            statistics.median(abs(p - m) / m for p, m in zip(cat, cat_meas, strict=True))
            if cat_rows
            else None
        ),
        rank_agreement_calibrated=_agreement(cal, meas),
        rank_agreement_catalog=_agreement(cat, cat_meas) if cat_rows else None,
    )
