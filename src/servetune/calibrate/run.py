"""The calibration, end to end (see the package's docstring)."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from servetune import __version__
from servetune.calibrate.evidence import RunEvidence, load_evidence
from servetune.calibrate.fit import FitCase, fit, simulated_figures
from servetune.calibrate.holdout import Used, split
from servetune.calibrate.identify import Identified, device_spec, identify, identity
from servetune.calibrate.replay import (
    by_prompt_length,
    figures,
    rel_error,
    replay_config,
    replay_plan,
)
from servetune.errors import ConfigError
from servetune.results.calibration_file import (
    FIGURES,
    Calibration,
    CalibrationProfile,
    Deployment,
    Evidence,
    MeasuredRange,
    RunError,
    median_abs,
)
from servetune.sim.efficiency import efficiency
from servetune.sim.memory import plan_memory

LARGE_HELD_OUT = {"output_throughput": 0.10, "mean_ttft_ms": 0.15, "mean_tpot_ms": 0.15}
"""Held-out median errors above these are warned about (the accuracy a planner needs)."""


def _concurrency(ev: RunEvidence) -> float:
    return float(ev.run.summary.mean_concurrency or 0.0)


def _measured_range(used: Sequence[Used]) -> MeasuredRange:
    seqs = sorted({int(u.it.config.resolve().max_num_seqs) for u in used})
    running = 0
    for u in used:
        s = u.ev.run.server.summary if u.ev.run.server is not None else {}
        got = s.get("running_max")
        running = max(running, int(got) if isinstance(got, int | float) else 0)
        running = max(running, int(u.ev.run.summary.max_concurrent_requests or 0))
    ctx = max(
        ((r.prompt_tokens or r.planned_input_len) + (r.output_tokens or 0))
        for u in used
        for r in u.ev.ok_records
    )
    mixes = [u.mix for u in used]
    rates = [u.rate for u in used]
    return MeasuredRange(
        max_num_seqs=seqs,
        max_running=running,
        max_context_tokens=ctx,
        input_tokens=(min(m[0] for m in mixes), max(m[0] for m in mixes)),
        output_tokens=(min(m[1] for m in mixes), max(m[1] for m in mixes)),
        request_rates=(min(rates), max(rates)),
        tensor_parallel_size=sorted({u.it.config.tensor_parallel_size for u in used}),
    )


def _profile_id(name: str, dep: Deployment, labels: list[str]) -> str:
    h = hashlib.sha256((dep.model_dump_json() + "|".join(labels)).encode()).hexdigest()[:8]
    return f"{name}-{h}"


def calibrate(
    paths: Sequence[str | Path],
    *,
    server_cmd: str | None = None,
    gpu: str | None = None,
    model: str | None = None,
    engine_version: str | None = None,
    holdout: str = "auto",
    name: str = "calibration",
    progress: Callable[[str], None] | None = None,
    max_evaluations: int = 30,
) -> CalibrationProfile:
    """Fit the simulator to the runs in ``paths`` (run or sweep directories of one
    deployment) and measure how well it predicts the ones it held out."""
    t0 = time.monotonic()
    say = progress or (lambda _m: None)
    evs = load_evidence(list(paths))
    say(f"read {len(evs)} run(s)")
    evidence: list[Evidence] = []
    used: list[Used] = []
    its: list[Identified] = []
    for ev in evs:
        n = len(ev.ok_records)
        if ev.refused:
            evidence.append(
                Evidence(
                    run=str(ev.path),
                    label=ev.label,
                    requests=n,
                    used=False,
                    role="refused",
                    reason=ev.refused,
                )
            )
            continue
        it = identify(ev, server_cmd, gpu, model)
        its.append(it)
        used.append(
            Used(
                ev,
                it,
                figures(ev.run.summary) | by_prompt_length(ev.records),
                _concurrency(ev),
                float(ev.run.summary.request_throughput or 0.0),
            )
        )
        evidence.append(Evidence(run=str(ev.path), label=ev.label, requests=n))
    if not used:
        reasons = "; ".join(f"{e.label}: {e.reason}" for e in evidence)
        raise ConfigError(
            f"no run can inform a fit ({reasons})",
            hint="re-measure with the client keeping up, few failures and the prefix cache "
            "not serving more than the workload repeats",
            code="calibrate.no_evidence",
        )
    ids = {identity(it) for it in its}
    if len(ids) > 1:
        raise ConfigError(
            "the runs measured more than one deployment: "
            + "; ".join(f"{e} {m} on {g} TP{t}" for e, m, g, t in sorted(ids)),
            hint="calibrate each deployment on its own runs",
            code="calibrate.mixed",
        )
    first = its[0]
    device = device_spec(first)
    fit_idx, held_idx, how, noise = split(used, holdout)
    for i, e in enumerate(x for x in evidence if x.used):
        e.role = "held_out" if i in held_idx else "fit"
    dep = Deployment(
        engine=first.engine_id,
        engine_version=engine_version,
        model=first.config.model,
        device=device,
        tensor_parallel_size=first.config.tensor_parallel_size,
        knobs={k: v for k, v in first.knobs.items() if isinstance(v, int | float | bool | str)},
        server_cmd=server_cmd or used[0].ev.server_cmd,
    )
    labels = [used[i].ev.label for i in fit_idx]
    pools = [u.it.kv_pool_tokens for u in used if u.it.kv_pool_tokens]
    base_cal = Calibration(
        id=_profile_id(name, dep, labels),
        deployment=dep,
        kv_cache_tokens=min(pools) if pools else None,
        measured=_measured_range([used[i] for i in fit_idx]),
    )
    cases: list[FitCase] = []
    for u in used:
        r = u.it.config.model_copy(update={"calibration": base_cal}).resolve()
        cfg = replay_config(u.ev.run.config)
        cases.append(
            FitCase(
                u.ev.label,
                replay_plan(u.ev.records),
                cfg,
                r,
                plan_memory(r),
                u.measured,
                u.concurrency,
                u.ev.ok_records,
            )
        )
    say(f"fitting on {len(fit_idx)} run(s), {len(held_idx)} held out")
    result = fit([cases[i] for i in fit_idx], progress=say, max_evaluations=max_evaluations)
    errors: list[RunError] = []
    for i, case in enumerate(cases):
        sim = simulated_figures(case, result.constants)
        errors.append(
            RunError(
                run=str(used[i].ev.path),
                label=case.label,
                role="held_out" if i in held_idx else "fit",
                measured=case.measured,
                simulated=sim,
                error={f: rel_error(sim.get(f), case.measured.get(f)) for f in FIGURES},
            )
        )
    base = efficiency(cases[0].r.gpu)
    catalog = {k: float(getattr(base, k)) for k in result.constants}
    uncalibrated: list[dict[str, float | None]] = []
    for i in held_idx:
        sim = simulated_figures(cases[i], catalog)
        uncalibrated.append({f: rel_error(sim.get(f), cases[i].measured.get(f)) for f in FIGURES})
    catalog_held = {f: median_abs([u[f] for u in uncalibrated]) for f in FIGURES}
    in_sample = {f: median_abs([e.error[f] for e in errors if e.role == "fit"]) for f in FIGURES}
    held = {f: median_abs([e.error[f] for e in errors if e.role == "held_out"]) for f in FIGURES}
    warnings = [n for it in its for n in it.notes]
    warnings = list(dict.fromkeys(warnings))
    if not held_idx:
        warnings.append(
            "nothing was held out: the errors below are in-sample only; give more runs "
            "(another level, another length mix, a repeat) to measure the profile's error"
        )
    for f, limit in LARGE_HELD_OUT.items():
        v = held.get(f)
        if v is not None and v > limit:
            warnings.append(
                f"held-out median error on {f} is {v:.0%} (above {limit:.0%}): predictions "
                "of this profile are that uncertain"
            )
    for f, v in noise.items():
        h = held.get(f)
        if v is not None and h is not None and h <= v:
            warnings.append(
                f"{f}: the held-out error ({h:.1%}) is within the repeats' own noise ({v:.1%})"
            )
    cal = base_cal.model_copy(
        update={"constants": {k: round(v, 6) for k, v in result.constants.items()}}
    )
    say(f"fitted in {result.evaluations} simulations, {time.monotonic() - t0:.1f} s")
    return CalibrationProfile(
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        servetune_version=__version__,
        calibration=cal,
        fitted=result.fitted,
        unidentified=result.unidentified,
        evidence=evidence,
        holdout=how,
        errors=errors,
        in_sample=in_sample,
        held_out=held,
        catalog_held_out=catalog_held,
        noise=noise,
        warnings=warnings,
        took_s=round(time.monotonic() - t0, 2),
    )


__all__ = ["calibrate"]
