"""The fit: the step-time and host constants that make the simulator replay the fit runs as
they were measured.

Least squares on the log of simulated over measured figures of every fit run (output
throughput, mean TTFT, mean TPOT at full weight; P99 TTFT and P99 TPOT at a quarter — a
tail moves by jumps as scheduling decisions flip; from the
records, the mean TTFT of the shortest and of the longest third of the prompts, which tell
the prefill's cost per token from the API server's fixed latency), over the log
of the constants (so each moves by ratios, bounded), starting from estimates read off the
runs themselves (the lightest run's TPOT and TTFT, the slope of TPOT over concurrency). The
simulator is a discrete-event model, so derivatives are taken by 5% steps, not
infinitesimals.

What the data cannot identify is found from the fit's own Jacobian: a constant whose doubling
moves no residual by more than :data:`MIN_SENSITIVITY` keeps the catalog's value and is
reported as unidentified; the others get a standard error from the Jacobian and the
residuals' spread (relative, as the fit is in logs).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from servetune.arch.memory import MemoryPlan
from servetune.calibrate.replay import figures, replay
from servetune.calibrate.steps import decode_line, prefill_line
from servetune.results.calibration_file import Constant
from servetune.results.record import RequestRecord
from servetune.results.schema import BenchConfig
from servetune.sim.efficiency import Efficiency, efficiency
from servetune.sim.perf import StepModel
from servetune.sim.resolved import ResolvedConfig
from servetune.workload.plan import Plan

PARAMS: dict[str, tuple[float, float]] = {
    "mfu": (1e-3, 3.0),
    "mbu": (1e-3, 3.0),
    "step_overhead_ms": (1e-3, 500.0),
    "per_seq_overhead_us": (1e-2, 50_000.0),
    "frontend_per_request_ms": (1e-3, 200.0),
    "frontend_per_token_us": (1e-2, 20_000.0),
    "frontend_latency_ms": (1e-3, 500.0),
}
"""The constants fitted, with their bounds."""

WEIGHTS = {
    "output_throughput": 1.0,
    "mean_ttft_ms": 1.0,
    "mean_tpot_ms": 1.0,
    "p99_ttft_ms": 0.25,
    "p99_tpot_ms": 0.25,
    "ttft_short_prompts_ms": 0.7,
    "ttft_long_prompts_ms": 0.7,
}

MIN_SENSITIVITY = 0.02
"""A constant is identified when doubling it moves the residual vector by at least this
(log units, i.e. ~2% on some figure, weighted)."""

NOISE_FLOOR = 0.02
"""The residuals' spread assumed at least (2%, log units) when judging what the runs tell
apart: a near-perfect fit does not make collinear constants identified."""

PRIOR_WEIGHT = 0.003
"""A faint pull towards the starting point, so a constant the data cannot see stays put."""


@dataclass
class FitCase:
    """One fit run, ready to replay."""

    label: str
    plan: Plan
    cfg: BenchConfig
    r: ResolvedConfig
    mem: MemoryPlan
    measured: dict[str, float | None]
    concurrency: float
    records: list[RequestRecord]


@dataclass
class FitResult:
    constants: dict[str, float]
    fitted: list[Constant]
    unidentified: dict[str, str]
    evaluations: int
    residual_rms: float


def _with(r: ResolvedConfig, eff: Efficiency) -> ResolvedConfig:
    """``r`` running with ``eff``'s constants (its calibration replaced)."""
    from servetune.results.calibration_file import Calibration, Deployment, DeviceSpec

    cal = r.calibration or Calibration(
        id="fit",
        deployment=Deployment(
            engine=r.engine,
            model=r.model.name,
            device=DeviceSpec(
                name=r.gpu.name,
                peak_tflops=r.gpu.bf16_tflops,
                memory_gb_s=r.gpu.hbm_gb_s,
                memory_gib=r.gpu.usable_gib,
            ),
        ),
    )
    consts = {k: getattr(eff, k) for k in PARAMS}
    return r.model_copy(update={"calibration": cal.model_copy(update={"constants": consts})})


def start_point(cases: list[FitCase], base: Efficiency) -> dict[str, float]:
    """Estimates read off the records (:mod:`.steps`): the decode step's fixed part split
    between reading the weights and the CPU's fixed cost as the catalog splits it, its cost
    per request; the prefill's cost per prompt token (from the requests that found the server
    idle) and the fixed latency beside it. Where the records cannot tell (a single prompt
    length), the catalog's latency and the rest as prefill."""
    runs = [c.records for c in cases]
    r = cases[0].r
    sm = StepModel(r, base)
    w_cat = sm.weight_bytes / sm.bytes_per_s
    fixed_cat = sm.fixed_s
    share = w_cat / (w_cat + fixed_cat) if w_cat + fixed_cat > 0 else 0.5
    est = {k: float(getattr(base, k)) for k in PARAMS}
    dec = decode_line(runs)
    if dec is not None and dec.intercept > 0:
        a = dec.intercept
        est["mbu"] = sm.weight_bytes / (r.gpu.hbm_gb_s * 1e9 * share * a)
        est["step_overhead_ms"] = (1 - share) * a * 1e3
        est["per_seq_overhead_us"] = max(dec.slope, 0.0) * 1e6 or base.per_seq_overhead_us
    # a prefill step is compute-bound: the weights' read hides under it, its CPU cost not
    step = est["step_overhead_ms"] / 1e3
    pre = prefill_line(runs)
    flops_per_token = sm.linear_flops_per_token
    peak = sm.flops_per_s / base.mfu
    latency_cat = base.frontend_latency_ms / 1e3
    if pre is not None and pre.slope > 0:
        est["mfu"] = flops_per_token / (peak * pre.slope)
        rest = pre.intercept - step - base.frontend_per_request_ms / 1e3
        est["frontend_latency_ms"] = max(rest, 0.0) * 1e3
    elif pre is not None:
        mean_in = statistics.fmean(s.input_len for c in cases for s in c.plan.requests)
        prefill = pre.intercept - step - latency_cat - base.frontend_per_request_ms / 1e3
        if prefill > 0:
            est["mfu"] = flops_per_token * mean_in / (peak * prefill)
    return {k: min(max(v, PARAMS[k][0] * 1.01), PARAMS[k][1] * 0.99) for k, v in est.items()}


def fit(
    cases: list[FitCase],
    progress: Callable[[str], None] | None = None,
    max_evaluations: int = 30,
) -> FitResult:
    """The constants for ``cases`` (all of one deployment)."""
    from scipy.optimize import least_squares

    base = efficiency(cases[0].r.gpu)
    x0_vals = start_point(cases, base)
    names = list(PARAMS)
    lo_all = np.array([math.log(PARAMS[n][0] / x0_vals[n]) for n in names])
    hi_all = np.array([math.log(PARAMS[n][1] / x0_vals[n]) for n in names])
    evals = 0
    say = progress or (lambda _m: None)

    def residuals_for(c: dict[str, float]) -> np.ndarray:
        nonlocal evals
        evals += 1
        eff = base.model_copy(update=c)
        res: list[float] = []
        for case in cases:
            sim = replay(case.plan, case.cfg, _with(case.r, eff), case.mem)
            for f, w in WEIGHTS.items():
                m, s = case.measured.get(f), sim.get(f)
                if m is None or m <= 0:
                    continue
                s = s if s is not None and s > 0 and math.isfinite(s) else m * 1e3
                res.append(w * math.log(s / m))
        if evals % 10 == 0:
            say(f"fit: {evals} simulations of {len(cases)} run(s)")
        return np.array(res)

    cache: dict[bytes, np.ndarray] = {}

    def full(x: np.ndarray) -> np.ndarray:
        """Residuals at the log-offsets ``x`` of every constant (the catalog's for a fixed
        one is its offset); cached: the solver asks for points twice."""
        key = np.asarray(x, dtype=float).tobytes()
        got = cache.get(key)
        if got is None:
            c = {n: x0_vals[n] * math.exp(float(xi)) for n, xi in zip(names, x, strict=True)}
            got = cache[key] = residuals_for(c)
        return got

    def differences(x: np.ndarray, idx: list[int], step: float) -> np.ndarray:
        """Forward differences in ``idx``'s constants, ``step`` in log units (backwards at
        an upper bound): the simulator is a discrete-event model, so the step is a ratio."""
        f0 = full(x)
        cols = []
        for j in idx:
            h = step if x[j] + step <= hi_all[j] else -step
            xj = x.copy()
            xj[j] += h
            cols.append((full(xj) - f0) / h)
        return np.stack(cols, axis=1)

    def solve(x: np.ndarray, idx: list[int]) -> np.ndarray:
        def sub(v: np.ndarray) -> np.ndarray:
            y = x.copy()
            y[idx] = v
            return y

        def fun(v: np.ndarray) -> np.ndarray:
            return np.concatenate([full(sub(v)), PRIOR_WEIGHT * v])

        def jac(v: np.ndarray) -> np.ndarray:
            body = differences(sub(v), idx, 0.05)
            return np.concatenate([body, PRIOR_WEIGHT * np.eye(len(idx))])

        sol = least_squares(
            fun,
            x[idx],
            jac=jac,
            bounds=(lo_all[idx], hi_all[idx]),
            max_nfev=max_evaluations,
            x_scale=1.0,
            ftol=1e-4,
            xtol=1e-8,
        )
        start, end = fun(x[idx]), sol.fun
        say(f"fit: {sol.message} ({sol.nfev} steps, cost {start @ start:.4g} -> {end @ end:.4g})")
        return sub(sol.x)

    x = np.zeros(len(names))
    active = list(range(len(names)))
    x = solve(x, active)
    unidentified: dict[str, str] = {}
    # a constant the runs do not see: set to twice the larger of its fitted and catalog
    # values, no figure of the fit runs moves — it keeps the catalog's value
    f0 = full(x)
    for i in list(active):
        n = names[i]
        scale = max(x0_vals[n] * math.exp(float(x[i])), float(getattr(base, n)))
        xi = x.copy()
        xi[i] = math.log(min(2.0 * scale, PARAMS[n][1]) / x0_vals[n])
        moved = float(np.linalg.norm(full(xi) - f0))
        if moved < MIN_SENSITIVITY:
            unidentified[n] = (
                f"twice its value moves the fit runs' figures by {moved:.1%} at most "
                "(weighted): the runs do not exercise it; the catalog's value is kept"
            )
            active.remove(i)
            x[i] = math.log(max(float(getattr(base, n)), PARAMS[n][0]) / x0_vals[n])
    # the uncertainty of the others, at no less than the noise floor: constants the runs
    # see only together get wide errors (and say with which)
    jac = differences(x, active, 0.05) if active else np.zeros((len(f0), 0))
    body = full(x)
    sigma2 = max(float(body @ body) / max(1, len(body) - len(active)), NOISE_FLOOR**2)
    cov = np.linalg.pinv(jac.T @ jac) * sigma2 if active else np.zeros((0, 0))
    rel_se = [math.sqrt(max(0.0, float(cov[k, k]))) for k in range(len(active))]
    corr_note: dict[int, str] = {}
    for k in range(len(active)):
        for m in range(len(active)):
            if m == k or cov[k, k] <= 0 or cov[m, m] <= 0:
                continue
            rho = float(cov[k, m]) / math.sqrt(float(cov[k, k]) * float(cov[m, m]))
            if abs(rho) > 0.9:
                corr_note[k] = f"told apart from {names[active[m]]} only loosely (ρ {rho:+.2f})"
    values = {n: x0_vals[n] * math.exp(float(x[j])) for j, n in enumerate(names)}
    values.update({n: float(getattr(base, n)) for n in unidentified})
    fitted = [
        Constant(
            name=names[i],
            value=values[names[i]],
            std_error=values[names[i]] * rel_se[k],
            how="fitted",
            note=corr_note.get(k, ""),
        )
        for k, i in enumerate(active)
    ] + [
        Constant(name=n, value=values[n], how="catalog", note=unidentified[n]) for n in unidentified
    ]
    rms = math.sqrt(float(body @ body) / max(1, len(body)))
    return FitResult(values, fitted, unidentified, evals, rms)


def simulated_figures(case: FitCase, constants: dict[str, float]) -> dict[str, float | None]:
    """``case`` replayed with ``constants`` (over the catalog's)."""
    eff = efficiency(case.r.gpu).model_copy(update=constants)
    return replay(case.plan, case.cfg, _with(case.r, eff), case.mem)


__all__ = ["PARAMS", "FitCase", "FitResult", "figures", "fit", "simulated_figures"]
