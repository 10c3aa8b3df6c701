"""The cost of a run or a sweep: $/Mtok at each level, at the knee and at saturation.

Which GPUs served it: the simulated engine's configuration recorded in the result (GPU type,
tensor-parallel size), or ``--gpu``/``--gpus`` for a real server (a real run does not say). The
price: :class:`~servetune.cost.prices.PriceBook`. The formula:
:mod:`servetune.cost.formula`.

- *level*: each measured level (a run is one level), at what it served;
- *knee*: the sweep's comfortable operating point (throughput interpolated between the
  levels that bracket it, as the knee itself is);
- *saturation*: the level with the highest output throughput (the plateau: the cheapest a
  token gets on this deployment, at the worst latency);
- *cheapest*: the level with the lowest blended $/Mtok; every point carries ``vs_cheapest``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servetune.checks import validated
from servetune.cost.formula import FORMULA, token_cost
from servetune.cost.prices import PriceBook, canonical_gpu
from servetune.errors import ConfigError, ResultError, ServetuneError
from servetune.results.calibration_file import Calibration
from servetune.results.cost_file import CostPoint, CostReport, CostRequest, PriceUsed
from servetune.results.io import RUN_FILE, detect_dir, read_run_result
from servetune.results.schema import RunResult
from servetune.results.sweep_schema import LevelRow, SweepResult, read_sweep_result

LOW_USE = 0.8
"""The seed's cost order, step 2: push GPU/KV use past 80% before adding GPUs."""


ONE_GPU_ASSUMED = (
    "--gpu, one GPU assumed (the run does not say how many served it: pass --gpus N for a "
    "server split over several — tensor, pipeline or data parallel)"
)


@dataclass(frozen=True)
class Deployment:
    gpu: str
    count: int
    source: str


def _from_engine(engine: dict[str, Any] | None) -> tuple[str, int] | None:
    if not engine or not engine.get("gpu"):
        return None
    tp = int(engine.get("tensor_parallel_size") or 1)
    return str(engine["gpu"]), tp


def deployment(
    recorded: dict[str, Any] | None,
    gpu: str | None,
    gpus: int | None,
    calibration: Calibration | None = None,
) -> Deployment:
    """GPU type and count: flags win over what the result records, and that over the
    calibration profile's deployment; a real run needs one of them."""
    rec = _from_engine(recorded)
    if rec is None and gpu is None and calibration is not None:
        d = calibration.deployment
        count = gpus if gpus is not None else d.tensor_parallel_size
        return Deployment(
            canonical_gpu(d.device.name),
            count,
            f"the calibration profile's deployment ({d.device.name}, tensor parallel "
            f"{d.tensor_parallel_size}; calibration {calibration.id})",
        )
    if gpu is not None:
        if gpus is None and rec is None:
            return Deployment(canonical_gpu(gpu), 1, ONE_GPU_ASSUMED)
        count = gpus if gpus is not None else (rec[1] if rec else 1)
        return Deployment(canonical_gpu(gpu), count, "--gpu/--gpus")
    if rec is not None:
        name, tp = rec
        return Deployment(
            canonical_gpu(name),
            gpus if gpus is not None else tp,
            f"the simulated engine's configuration ({name}, tensor parallel {tp})",
        )
    raise ConfigError.over_fields(
        "the result does not say which GPUs served it (a real server's run records no GPU)",
        hint="give {gpu} and {gpus}, e.g. {gpu}=A100-80GB {gpus}=1 (see `servetune sim gpus`)",
    )


def _busy(run: RunResult | None) -> float | None:
    sim = run.target.simulated if run is not None else None
    v = (sim or {}).get("engine_busy_share")
    return float(v) if isinstance(v, int | float) else None


def _point_from_run(label: str, run: RunResult, usd_h: float, r: float) -> CostPoint:
    s = run.summary
    server = run.server.summary if run.server is not None else {}
    out_tok = s.output_throughput
    in_tok = max(0.0, s.total_token_throughput - s.output_throughput)
    return _point(
        label=label,
        offered=None if math.isinf(run.config.request_rate) else run.config.request_rate,
        req_s=s.request_throughput,
        in_tok=in_tok,
        out_tok=out_tok,
        goodput=s.request_goodput,
        usd_h=usd_h,
        r=r,
        kv=server.get("kv_cache_usage_mean"),
        gpu_util=server.get("gpu_utilization_mean"),
        busy=_busy(run),
        running=server.get("running_mean"),
        ttft=s.ttft.p99,
        tpot=s.tpot.p99,
    )


def _point(
    *,
    label: str,
    offered: float | None,
    req_s: float | None,
    in_tok: float,
    out_tok: float,
    goodput: float | None,
    usd_h: float,
    r: float,
    kv: float | None = None,
    gpu_util: float | None = None,
    busy: float | None = None,
    running: float | None = None,
    ttft: float | None = None,
    tpot: float | None = None,
    compute: float | None = None,
) -> CostPoint:
    c = token_cost(usd_h, in_tok, out_tok, r)
    good = None
    if goodput is not None and req_s and req_s > 0 and c.output_usd_per_mtok is not None:
        # Requests that missed an SLO are paid for but worth nothing.
        good = c.output_usd_per_mtok * req_s / goodput if goodput > 0 else math.inf
    per_1k = usd_h / 3600.0 / req_s * 1000 if req_s and req_s > 0 else None
    return CostPoint(
        label=label,
        offered_rate=offered,
        request_throughput=req_s,
        input_tok_s=in_tok,
        output_tok_s=out_tok,
        input_usd_per_mtok=c.input_usd_per_mtok,
        output_usd_per_mtok=c.output_usd_per_mtok,
        blended_usd_per_mtok=c.blended_usd_per_mtok,
        goodput_output_usd_per_mtok=None if good is None or math.isinf(good) else good,
        usd_per_1k_requests=per_1k,
        kv_cache_usage_mean=kv,
        gpu_utilization_mean=gpu_util,
        engine_busy_share=busy,
        compute_use=compute,
        running_mean=running,
        ttft_p99_ms=ttft,
        tpot_p99_ms=tpot,
    )


def _compute_use(
    run_dir: Path, gpu: str | None, model: str | None, mfu: float | None = None
) -> float | None:
    """diagnose's compute estimate for one run as a share of what the engine reaches (the
    catalog's compute efficiency, or ``mfu``: the one a calibration measured on this
    deployment), or None."""
    from servetune.diagnose import diagnose_path

    try:
        diag = diagnose_path(run_dir, gpu=gpu, model=model)
    except ServetuneError:
        return None
    if mfu is not None:
        est = diag.figures.get("compute_use_est")
        return float(est) / mfu if isinstance(est, int | float) and mfu > 0 else None
    v = diag.figures.get("compute_of_ceiling")
    return float(v) if isinstance(v, int | float) else None


def _calibrated_mfu(cal: Calibration | None, dep: Deployment, warnings: list[str]) -> float | None:
    """The compute efficiency ``cal`` measured, when it was measured on the GPU that served
    the result (else the catalog's stands, and the warning says why)."""
    if cal is None:
        return None
    mfu = cal.constants.get("mfu")
    if not isinstance(mfu, int | float) or isinstance(mfu, bool):
        warnings.append(
            f"calibration {cal.id} did not fit the compute efficiency: the compute load is a "
            "share of the catalog's"
        )
        return None
    try:
        same = canonical_gpu(cal.deployment.device.name) == dep.gpu
    except ServetuneError:
        same = False
    if not same:
        warnings.append(
            f"calibration {cal.id} was measured on {cal.deployment.device.name}, not {dep.gpu}: "
            "the compute load is a share of the catalog's compute efficiency, not its"
        )
        return None
    return float(mfu)


def _level_run(sweep_dir: Path, row: LevelRow) -> RunResult | None:
    p = sweep_dir / row.level_dir
    if not (p / RUN_FILE).is_file():
        return None
    try:
        return read_run_result(p)
    except ServetuneError:
        return None


def _row_point(row: LevelRow, run: RunResult | None, usd_h: float, r: float) -> CostPoint:
    srv = row.server
    return _point(
        label=row.label,
        offered=row.offered_rate
        if row.offered_rate is None or not math.isinf(row.offered_rate)
        else None,
        req_s=row.request_throughput,
        in_tok=max(0.0, row.total_token_throughput - row.output_throughput),
        out_tok=row.output_throughput,
        goodput=row.request_goodput,
        usd_h=usd_h,
        r=r,
        kv=srv.kv_cache_usage_mean if srv else None,
        gpu_util=srv.gpu_utilization_mean if srv else None,
        busy=_busy(run),
        running=srv.running_mean if srv else None,
        ttft=row.ttft_p99,
        tpot=row.tpot_p99,
    )


def _lerp(a: float | None, b: float | None, f: float) -> float | None:
    if a is None or b is None:
        return a if b is None else (b if a is None else None)
    return a + (b - a) * f


def _knee_point(
    sweep: SweepResult, points: dict[str, CostPoint], usd_h: float, r: float
) -> CostPoint | None:
    k = sweep.knee
    if k is None or k.status != "found" or k.throughput is None or not k.bracket:
        return None
    a, b = points.get(k.bracket[0]), points.get(k.bracket[1])
    if a is None or b is None or a.request_throughput is None or b.request_throughput is None:
        return None
    span = b.request_throughput - a.request_throughput
    f = 0.0 if span <= 0 else min(1.0, max(0.0, (k.throughput - a.request_throughput) / span))
    in_per_req = _lerp(
        a.input_tok_s / a.request_throughput if a.request_throughput else None,
        b.input_tok_s / b.request_throughput if b.request_throughput else None,
        f,
    )
    out_tok = k.output_throughput
    if out_tok is None:
        out_tok = _lerp(a.output_tok_s, b.output_tok_s, f) or 0.0
    lat = k.latency_p99_ms
    return _point(
        label="knee",
        offered=k.offered if sweep.config.mode == "rate" else None,
        req_s=k.throughput,
        in_tok=(in_per_req or 0.0) * k.throughput,
        out_tok=out_tok,
        goodput=None,
        usd_h=usd_h,
        r=r,
        kv=_lerp(a.kv_cache_usage_mean, b.kv_cache_usage_mean, f),
        gpu_util=_lerp(a.gpu_utilization_mean, b.gpu_utilization_mean, f),
        busy=_lerp(a.engine_busy_share, b.engine_busy_share, f),
        compute=_lerp(a.compute_use, b.compute_use, f),
        running=k.concurrency_server if k.concurrency_server is not None else k.concurrency,
        ttft=lat.get("ttft"),
        tpot=lat.get("tpot"),
    )


def _use_of(p: CostPoint) -> tuple[str, float] | None:
    """The best-measured 'how used is the GPU' figure of a point (name, 0–1)."""
    if p.gpu_utilization_mean is not None:
        return "GPU utilisation", p.gpu_utilization_mean
    if p.kv_cache_usage_mean is not None:
        return "KV-cache use", p.kv_cache_usage_mean
    return None


def _advice(report: CostReport) -> list[str]:
    out: list[str] = []
    cheap = report.cheapest
    point = report.knee or (report.levels[0] if len(report.levels) == 1 else None)
    if point is not None and cheap is not None and point.label != cheap.label:
        gap = (report.knee_vs_cheapest or 1.0) - 1.0
        if gap > 0.05:
            out.append(
                f"at the {point.label} a token costs {gap:.0%} more than at the cheapest measured "
                f"point ({cheap.label}): that is the price of the latency the knee keeps"
            )
    if point is not None:
        kv = point.kv_cache_usage_mean
        compute = point.compute_use
        use = _use_of(point)
        if compute is not None and compute >= LOW_USE and (kv is None or kv < LOW_USE):
            out.append(
                f"compute-bound at the {point.label}: the estimated compute load is "
                f"{compute:.0%} of what the engine reaches while KV-cache use is "
                f"{_share(kv)} — a bigger KV pool buys nothing here; quantizing the weights for "
                "speed (fp8) does (seed's cost order, step 1), then more GPUs (step 4)"
            )
        elif kv is not None and kv < LOW_USE and (compute is None or compute < LOW_USE):
            figs = f"KV-cache use {kv:.0%}" + (
                f", compute {compute:.0%} of what the engine reaches" if compute is not None else ""
            )
            out.append(
                f"{figs} at the {point.label}: GPUs paid for and under-used (seed's cost order, "
                "step 2: a bigger batch or more load before adding GPUs; step 1: quantize)"
            )
        if use is not None and use[0] != "KV-cache use" and use[1] < LOW_USE:
            out.append(f"{use[0]} is {use[1]:.0%} at the {point.label}: capacity is paid for idle")
    return out


def _share(v: float | None) -> str:
    return "unknown" if v is None else f"{v:.0%}"


def cost_of(
    path: str | Path,
    prices: PriceBook,
    *,
    gpu: str | None = None,
    gpus: int | None = None,
    r: float = 4.0,
    model: str | None = None,
    calibration: Calibration | None = None,
) -> CostReport:
    """The CostReport of a RUN_DIR or a SWEEP_DIR (the request checked as
    :class:`~servetune.results.cost_file.CostRequest`). ``calibration``: a profile of the
    deployment that served it — its GPU type and count where neither the flags nor the result
    say, its model for the compute estimate, its measured compute efficiency as what the
    engine reaches."""
    validated(CostRequest, {"path": str(path), "gpu": gpu, "gpus": gpus, "r": r, "model": model})
    p = Path(path).expanduser()
    kind = detect_dir(p)
    warnings: list[str] = []
    points: list[CostPoint] = []
    knee: CostPoint | None = None
    lossy: set[str] = set()
    if calibration is not None:
        model = model or calibration.deployment.model
    if kind == "run":
        run = read_run_result(p)
        dep = deployment(run.target.simulated, gpu, gpus, calibration)
        mfu = _calibrated_mfu(calibration, dep, warnings)
        price = prices.price(dep.gpu)
        usd_h = price.usd_per_gpu_hour * dep.count
        if dep.source == ONE_GPU_ASSUMED:
            warnings.append(f"GPUs: {ONE_GPU_ASSUMED}")
        if run.status != "complete":
            warnings.append(
                _lost(f"the run is {run.status}", run.summary.completed, run.summary.failed)
            )
        if run.summary.completed == 0:
            raise ResultError(
                f"{p}: no request completed, so no token can be priced",
                hint="run a load test whose requests succeed first",
            )
        pt = _point_from_run(run.label or p.name, run, usd_h, r)
        pt.compute_use = _compute_use(p, gpu or _flag_gpu(dep, calibration), model, mfu)
        points.append(pt)
    else:
        sweep = read_sweep_result(p)
        dep = deployment(sweep.config.engine, gpu, gpus, calibration)
        mfu = _calibrated_mfu(calibration, dep, warnings)
        price = prices.price(dep.gpu)
        usd_h = price.usd_per_gpu_hour * dep.count
        if dep.source == ONE_GPU_ASSUMED:
            warnings.append(f"GPUs: {ONE_GPU_ASSUMED}")
        rows = [row for row in sweep.measured_rows() if row.completed > 0]
        lossy = {row.label for row in rows if row.status != "complete"}
        warnings += [
            _lost(f"level {row.label} is {row.status}", row.completed, row.failed)
            for row in rows
            if row.status != "complete"
        ]
        if not rows:
            raise ResultError(f"{p}: no level completed a request, so no token can be priced")
        by_label: dict[str, CostPoint] = {}
        for row in rows:
            pt = _row_point(row, _level_run(p, row), usd_h, r)
            pt.compute_use = _compute_use(
                p / row.level_dir, gpu or _flag_gpu(dep, calibration), model, mfu
            )
            by_label[row.label] = pt
            points.append(pt)
        knee = _knee_point(sweep, by_label, usd_h, r)
        if sweep.knee is not None and knee is None:
            warnings.append(f"no knee to price: {sweep.knee.verdict or sweep.knee.status}")
    # A level that lost requests is no operating point to aim for (requests were lost, and its
    # latencies describe only those that got through): the cheapest and saturated points are
    # drawn from the levels that completed, as the knee is, when there are any.
    pool = [x for x in points if x.label not in lossy] or points
    priced = [x for x in pool if x.blended_usd_per_mtok is not None]
    cheapest = min(priced, key=lambda x: x.blended_usd_per_mtok or math.inf) if priced else None
    saturation = max(pool, key=lambda x: x.output_tok_s) if len(points) > 1 else None
    if cheapest is not None and cheapest.blended_usd_per_mtok:
        for x in [*points, *([knee] if knee else [])]:
            if x.blended_usd_per_mtok is not None:
                x.vs_cheapest = x.blended_usd_per_mtok / cheapest.blended_usd_per_mtok
    report = CostReport(
        source_kind=kind,
        source_path=str(p),
        gpu=dep.gpu,
        gpu_count=dep.count,
        gpu_count_source=dep.source,
        price=PriceUsed(**price.model_dump(exclude={"note"})),
        usd_per_hour=usd_h,
        r=r,
        formula=FORMULA,
        levels=points,
        knee=knee,
        saturation=saturation,
        cheapest=cheapest,
        knee_vs_cheapest=knee.vs_cheapest if knee is not None else None,
        warnings=warnings,
        compute_ceiling=mfu,
    )
    report.advice = _advice(report)
    if kind == "run" and run.status != "complete":
        # its GPU use and price describe a run that lost requests: advice on load or batch
        # size drawn from them would be advice on the failures
        report.advice = [
            f"{run.summary.failed} of {run.summary.completed + run.summary.failed} requests "
            f"failed ({_classes(run.summary.error_classes)}): fix that first (`servetune "
            f"diagnose {p}` names the cause), then price a run that completes — the GPU use "
            "and $/Mtok above are those of the requests that got through"
        ]
    return report


def _flag_gpu(dep: Deployment, cal: Calibration | None) -> str | None:
    """The GPU diagnose's compute estimate is told about: the profile's, when the profile
    named the deployment (a recorded simulated engine names its own)."""
    return dep.gpu if cal is not None and "calibration profile" in dep.source else None


def _lost(what: str, completed: int, failed: int) -> str:
    return (
        f"{what}: {failed} of {completed + failed} requests failed — they are not counted as "
        "served tokens, so any GPU time they took is charged to the tokens that were"
    )


def _classes(classes: dict[str, int]) -> str:
    return ", ".join(f"{n} {c}" for c, n in classes.items()) or "no class recorded"
