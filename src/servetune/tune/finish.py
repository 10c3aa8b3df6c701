"""After the search: repeats of the best configurations ranked under noise
(:mod:`~servetune.tune.repeats`), the longer check of the figures reported
(:mod:`~servetune.tune.confirm`), the one-knob-at-a-time table around the winner
(:mod:`~servetune.tune.ofat`), the Pareto front, the command line, the gain over the baseline
(``--baseline``, or the engine's default) and the verdict (:mod:`~servetune.tune.verdict`).

The best is chosen by its score (:mod:`~servetune.tune.figures`: median − k·MAD of its
repeats, no higher than what it held on the longer check): the figures reported are checked
the best first, and one that does not hold its rate there drops in the ranking and the next is
checked in turn. A configuration whose engine failed in a repeat is not recommended (only if
every repeated one failed is the best of them kept).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from servetune.knobs import render_command
from servetune.profiles import profile
from servetune.results.tune_file import (
    Repeat,
    TrialRecord,
    TuneResult,
    TuneSpec,
    config_text,
)
from servetune.tune.backends import Backend
from servetune.tune.confirm import CONFIRM_LENGTH, confirm_config
from servetune.tune.figures import confirmation_of, repeat_of, score_of, value_of
from servetune.tune.ofat import ofat, roomier_neighbours
from servetune.tune.repeats import repeat_config
from servetune.tune.space import params_key
from servetune.tune.verdict import confirmed_text, no_config_verdict, verdict_text


def command_line(spec: TuneSpec, config: dict[str, Any]) -> str:
    """The exact command that serves the model with CONFIG (the simulated engine's
    configuration is vLLM's: ``vllm serve …``)."""
    engine = profile(spec.engine).knobs_as or spec.engine
    return render_command(engine, spec.model, config).shell()


def pareto_front(trials: list[TrialRecord]) -> list[TrialRecord]:
    """Trials not beaten on both throughput (higher) and P99 E2E latency (lower)."""
    pts = [
        t
        for t in trials
        if t.throughput and t.p99_latency_ms is not None and t.status in ("ok", "pruned")
    ]
    out = []
    for t in pts:
        assert t.throughput is not None and t.p99_latency_ms is not None
        dominated = any(
            o is not t
            and (o.throughput or 0) >= t.throughput
            and (o.p99_latency_ms or 0) <= t.p99_latency_ms
            and ((o.throughput or 0) > t.throughput or (o.p99_latency_ms or 0) < t.p99_latency_ms)
            for o in pts
        )
        if not dominated:
            out.append(t)
    return sorted(out, key=lambda t: t.throughput or 0.0)


def finish(
    result: TuneResult,
    backend: Backend,
    out_dir: Path,
    echo: Callable[[str], None] = print,
    measure_more: bool = True,
) -> TuneResult:
    """Fill repeats, OFAT, Pareto, best, default, gain and verdict in RESULT (in place)."""
    spec = result.spec
    trials = [t for t in result.trials if t.status != "duplicate"]
    measured = [t for t in trials if t.status == "ok" and t.value]
    ref_key = params_key(spec.reference_params())
    baseline = next((t for t in trials if params_key(t.params) == ref_key), None)
    default = next((t for t in trials if t.is_default), None)
    result.baseline, result.default = baseline, default
    result.pareto = pareto_front(trials)
    if not measured:
        result.status = "no-config-meets"
        result.verdict = no_config_verdict(spec, trials)
        return result
    ranked = sorted(measured, key=lambda t: t.value or 0.0, reverse=True)
    distinct: list[TrialRecord] = []
    for t in ranked:
        if params_key(t.params) not in {params_key(d.params) for d in distinct}:
            distinct.append(t)
    top = distinct[: spec.top_k]
    if (
        baseline is not None
        and baseline.status == "ok"
        and params_key(baseline.params) not in {params_key(t.params) for t in top}
    ):
        top.append(baseline)
    best = top[0]
    if measure_more:
        result.confirmations = []
    ref = params_key(baseline.params) if baseline is not None else None
    pool: list[tuple[Repeat | None, TrialRecord]] = [(None, t) for t in top]
    if spec.objective == "slo-max" and spec.repeats > 1 and measure_more:
        echo(f"repeating the {len(top)} best configurations {spec.repeats}× (other seeds)")
        result.repeats = []
        for i, t in enumerate(top, 1):
            rep = repeat_config(spec, backend, t, out_dir / "repeats" / f"{t.number:04d}")
            result.repeats.append(rep)
            vals = ", ".join("failed" if v is None else f"{v:.3g}" for v in rep.values)
            echo(f"  repeated {i}/{len(top)}: [{vals}]  {config_text(t.config)}")
        scored = [(r, t) for r, t in zip(result.repeats, top, strict=True) if r.score is not None]
        # a configuration whose engine failed in a repeat (crashed, OOM under load, would not
        # start) is not recommended, whatever its other repeats measured: the search fails a
        # trial for the same thing (only if every repeated one failed is the best of them kept)
        whole = [(r, t) for r, t in scored if not r.failed]
        pool = list(whole or scored)

    def rank(rt: tuple[Repeat | None, TrialRecord]) -> tuple[float, bool, bool, int]:
        # equal scores: steady first, then the reference (no change for nothing), then
        # the shortest command (a flag that changes nothing is a flag to maintain)
        r, t = rt
        steady = r is None or not r.unstable
        return (score_of(result, r, t), steady, params_key(t.params) == ref, -len(t.config))

    if pool:
        best = max(pool, key=rank)[1]
    if spec.objective == "slo-max" and measure_more and pool:
        # the figures reported are checked on longer probes, the best first: one that does
        # not hold its rate there drops in the ranking, and the next is checked in turn
        echo(f"checking the reported SLO-max on probes {CONFIRM_LENGTH}× as long")
        while confirmation_of(result, best) is None:
            confirm_config(spec, backend, result, best, out_dir, echo)
            best = max(pool, key=rank)[1]
        for other in (baseline, default if spec.baseline is not None else None):
            if other is not None and other.status == "ok" and not confirmation_of(result, other):
                confirm_config(spec, backend, result, other, out_dir, echo)
    result.best = best
    result.best_command = command_line(spec, best.config)
    best_rep = repeat_of(result, best)
    base_rep = repeat_of(result, baseline)
    b_val = value_of(result, best)
    base_val = value_of(result, baseline)
    if b_val and base_val:
        result.gain_over_baseline = b_val / base_val - 1.0
    d_val = value_of(result, default)
    if b_val and d_val:
        result.gain_over_default = b_val / d_val - 1.0
    if best_rep is not None and base_rep is not None and best_rep is not base_rep:
        got_b, got_d = best_rep.measured, base_rep.measured
        if len(got_b) >= 2 and len(got_d) >= 2:
            # the best's lowest figure (the rate it held on the longer probe among them)
            result.gain_beyond_noise = min([*got_b, b_val or 0.0]) > max(got_d)
    if spec.objective == "slo-max" and spec.ofat and measure_more and b_val:
        echo("one knob at a time around the best configuration")
        # at the rate the best held in every repeat (and on the longer probe): its median may
        # be one it met only with another draw of the workload, and the table would show the
        # best itself missing
        lowest = min(best_rep.measured) if best_rep and best_rep.measured else b_val
        result.ofat_rate = min(lowest, b_val)
        result.ofat = ofat(spec, backend, best, result.ofat_rate, out_dir / "ofat", echo)
        result.warnings += roomier_neighbours(result, best)
    result.status = "complete"
    result.verdict = verdict_text(spec, result, b_val, base_val, best_rep, base_rep, d_val)
    if measure_more and result.confirmations:
        result.verdict += confirmed_text(spec, result)
    return result
