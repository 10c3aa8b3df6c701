"""One trial of the study: screen the configuration (the memory planner), predict its SLO-max
on the simulated engine (a prediction far below the best so far prunes a real-engine trial
without launching it), launch it, search its SLO-max rate (or run it once at the workload's
rate for goodput / throughput / pareto) and record it. A configuration the planner rejects
scores 0 without a launch, a failed one scores 0 with the engine's log line — the sampler
learns the region to avoid; a configuration measured already is recorded as its duplicate."""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna

from servetune.errors import ServetuneError
from servetune.metrics.slo_spec import MAX_FAILED_SHARE
from servetune.results.tune_file import TrialRecord, TuneSpec
from servetune.tune.backends import Backend, engine_error_reason
from servetune.tune.search import find_slo_max, saturation_of
from servetune.tune.space import params_key
from servetune.tune.study import best_value, records

_Move = tuple[str, Any, str, dict[str, Any]]
PRUNE_BELOW = 0.6
"""A prediction below 60% of the best measured SLO-max prunes a real-engine trial."""
FIRST_START = 0.7
"""No prediction and no best yet: the search starts at 70% of the saturation throughput."""
FAR_MS = 1e9
"""Pareto latency of a configuration that could not be measured."""


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
        annotate: Callable[[TrialRecord], None] | None = None,
    ) -> None:
        """``annotate``: called on each record before it is stored (``on_record``: after)."""
        self.spec = spec
        self.annotate = annotate
        self.backend = backend
        self.result_dir = result_dir
        self.worker = worker or f"{socket.gethostname()}:{os.getpid()}"
        self.echo = echo
        self.on_record = on_record
        self.predictions: dict[str, float | None] = {}

    def _duplicate(self, study: optuna.Study, params: dict[str, Any]) -> TrialRecord | None:
        key = params_key(params)
        for r in records(study):
            if r.status != "duplicate" and params_key(r.params) == key:
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
        if self.annotate is not None:
            self.annotate(rec)
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
        reference = params_key(rec.params) == params_key(spec.reference_params())
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
