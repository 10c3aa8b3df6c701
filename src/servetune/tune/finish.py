"""After the search: repeats of the best configurations ranked under noise, the
one-knob-at-a-time table around the winner, the Pareto front, the command line, the gain
over the baseline (``--baseline``, or the engine's default) and the verdict.

Repeats: each of the ``top_k`` best distinct configurations (and the baseline) has
its SLO-max rate searched ``repeats`` times more with other draws of the workload (seed + r).
They are ranked by ``median − k·MAD`` (MAD: the median absolute deviation from the median),
so a configuration that wins once by luck does not beat one that is steadily good; one
whose repeats spread more than ``unstable_spread`` of their median ((max − min) / median) is
flagged *unstable*.

Checked on a longer run: the figures reported (the best's, the baseline's) are measured
again on one probe ``CONFIRM_LENGTH``× as long, stepping down while it misses; a draw that
meets the SLOs with a margin under the draw-to-draw noise is drawn again, and the rate holds
only when both meet; a figure is never above what held there, and the best is chosen on
that.

One knob at a time (the seed's step 4): from the winner, each searched knob one step down and
one step up its grid, alone, measured at the rate the winner held in every repeat: P50/P99
TTFT and TPOT, tok/s, KV-cache and GPU use, and whether the SLOs still hold.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from servetune.errors import ServetuneError
from servetune.knobs import render_command
from servetune.results.tune_file import (
    Confirmation,
    OfatRow,
    Probe,
    Repeat,
    TrialRecord,
    TuneResult,
    TuneSpec,
    config_text,
)
from servetune.tune.backends import Backend, engine_error_reason
from servetune.tune.search import find_slo_max, step_down
from servetune.tune.space import one_knob_moves

REPEAT_SEED_STEP = 1009
CONFIRM_LENGTH = 4
"""The reported SLO-max is checked on a probe this many times as long as the search's."""
NOISE_FLOOR = 0.02
"""A draw-to-draw noise measured on a few draws is itself uncertain (the standard deviation
of three spans 0.2–2.4× the true one, 90% of the time): a margin under 2% is always drawn
again."""
DEFAULT_NOISE = 0.05
"""Without repeats to measure it: the P99 TPOT of 4,000 requests spread 4–9% from draw to
draw on the simulated engine (Llama-3.1-8B / H100 at 0.68–0.93× its saturation)."""
HEADROOM = "slo_worst_ratio"
"""A one-knob row's figure: its SLO nearest the limit, as a share of it."""
ROOMIER = 0.8
"""A neighbour whose worst SLO is under 80% of the best's, at the best's rate, may serve more."""


def _key(params: dict[str, Any]) -> str:
    return repr(sorted((k, repr(v)) for k, v in params.items()))


def command_line(spec: TuneSpec, config: dict[str, Any]) -> str:
    """The exact command that serves the model with CONFIG (the simulated engine's
    configuration is vLLM's: ``vllm serve …``)."""
    engine = "vllm" if spec.engine == "sim" else spec.engine
    return render_command(engine, spec.model, config).shell()


def repeat_config(
    spec: TuneSpec,
    backend: Backend,
    rec: TrialRecord,
    out_dir: Path,
) -> Repeat:
    values: list[float | None] = [rec.slo_max]
    edge = [p.worst_ratio for p in _at(rec.probes, rec.slo_max)[:1]]
    note = ""
    for r in range(1, spec.repeats):
        seed = spec.workload.seed + r * REPEAT_SEED_STEP
        try:
            with backend.session(rec.config, out_dir / f"r{r}", seed=seed) as measure:
                res = find_slo_max(
                    measure,
                    rec.slo_max or 1.0,
                    max_probes=spec.probes,
                    tol=spec.tol,
                    saturation=rec.saturation,
                )
        except ServetuneError as exc:
            values.append(None)
            note = engine_error_reason(exc)
            continue
        edge += [p.worst_ratio for p in _at(res.probes, rec.slo_max)[:1]]
        if res.error is not None:
            values.append(None)
            note = res.error
        else:
            values.append(res.slo_max or 0.0)
    got = [v for v in values if v is not None]
    rep = Repeat(params=rec.params, config=rec.config, values=values, note=note)
    rep.edge_ratios = [e for e in edge if e is not None]
    if got:
        med = statistics.median(got)
        mad = statistics.median(abs(v - med) for v in got)
        rep.median, rep.mad = med, mad
        rep.score = med - spec.mad_k * mad
        spread = (max(got) - min(got)) / med if med > 0 else 0.0
        rep.unstable = spread > spec.unstable_spread or len(got) < len(values)
        if rep.unstable and not note:
            note = f"repeats spread {spread:.0%} of their median"
        rep.note = note
    return rep


def _at(probes: list[Probe], rate: float | None) -> list[Probe]:
    """The probes measured at RATE (each repeat's search starts at the first SLO-max)."""
    return [p for p in probes if rate is not None and p.rate == rate and p.error is None]


def draw_noise(result: TuneResult, trial: TrialRecord) -> float:
    """The draw-to-draw noise of TRIAL's worst SLO figure / its limit: the standard deviation
    over its draws at one rate (:attr:`Repeat.edge_ratios`: the search's probe at its SLO-max
    and each repeat's first, there) — no less than ``NOISE_FLOOR``; ``DEFAULT_NOISE`` when it
    was not measured on two draws or more.

    Measured on the search's probes, a quarter of the longer check's length, and taken as it
    is: the P99 TPOT of 4,000 requests spread 0.75× as much as that of 1,000 (simulated
    Llama-3.1-8B / H100, 8 draws each), not the ½ that independent requests would give — a
    batch's requests share its pace. (The 95% bootstrap interval of one run's P99, which
    takes its requests as independent, gave 0.3% where 4,000-request draws spread 4–5%.)"""
    rep = _repeat_of(result, trial)
    got = rep.edge_ratios if rep is not None else []
    if len(got) < 2:
        return DEFAULT_NOISE
    return max(statistics.stdev(got), NOISE_FLOOR)


def ofat(
    spec: TuneSpec,
    backend: Backend,
    best: TrialRecord,
    rate: float,
    out_dir: Path,
    echo: Callable[[str], None] = lambda _m: None,
) -> list[OfatRow]:
    rows: list[OfatRow] = []

    def measure_one(params: dict[str, Any], knob: str, value: Any, direction: str) -> None:
        config = spec.space.config(params)
        row = OfatRow(knob=knob, value=value, direction=direction)  # type: ignore[arg-type]
        reason = backend.screen(config)
        if reason is not None:
            row.status = f"rejected: {reason}"
            rows.append(row)
            return
        sub = out_dir / f"{knob}-{direction}"
        try:
            with backend.session(config, sub, server_metrics=True) as measure:
                p = measure(rate)
        except ServetuneError as exc:
            row.status = f"failed: {engine_error_reason(exc)}"
            rows.append(row)
            return
        if p.error is not None:
            row.status = f"failed: {p.error}"
        else:
            row.status = "meets SLOs" if p.meets else f"misses: {p.limiting}"
            row.figures = dict(p.figures)
            # the SLO nearest its limit, as a share of it: the row's headroom
            row.figures[HEADROOM] = p.worst_ratio
        rows.append(row)

    todo: list[tuple[dict[str, Any], str, Any, str]] = [(best.params, "—", "", "best")]
    names = [d.name for d in spec.space.dims]
    values = backend.engine_values(best.config, names)
    for knob, value, direction, params in one_knob_moves(spec.space, best.params, values):
        todo.append((params, knob, value, direction))
    for i, (params, knob, value, direction) in enumerate(todo, 1):
        measure_one(params, knob, value, direction)
        name = "best" if direction == "best" else f"{knob}={value}"
        echo(f"  {i}/{len(todo)} {name}: {rows[-1].status}")
    return rows


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
    ref_key = _key(spec.reference_params())
    baseline = next((t for t in trials if _key(t.params) == ref_key), None)
    default = next((t for t in trials if t.is_default), None)
    result.baseline, result.default = baseline, default
    result.pareto = pareto_front(trials)
    if not measured:
        result.status = "no-config-meets"
        result.verdict = _no_config_verdict(spec, trials)
        return result
    ranked = sorted(measured, key=lambda t: t.value or 0.0, reverse=True)
    distinct: list[TrialRecord] = []
    for t in ranked:
        if _key(t.params) not in {_key(d.params) for d in distinct}:
            distinct.append(t)
    top = distinct[: spec.top_k]
    if (
        baseline is not None
        and baseline.status == "ok"
        and _key(baseline.params) not in {_key(t.params) for t in top}
    ):
        top.append(baseline)
    best = top[0]
    if measure_more:
        result.confirmations = []
    ref = _key(baseline.params) if baseline is not None else None
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
        return (_score(result, r, t), steady, _key(t.params) == ref, -len(t.config))

    if pool:
        best = max(pool, key=rank)[1]
    if spec.objective == "slo-max" and measure_more and pool:
        # the figures reported are checked on longer probes, the best first: one that does
        # not hold its rate there drops in the ranking, and the next is checked in turn
        echo(f"checking the reported SLO-max on probes {CONFIRM_LENGTH}× as long")
        while _confirmation_of(result, best) is None:
            confirm_config(spec, backend, result, best, out_dir, echo)
            best = max(pool, key=rank)[1]
        for other in (baseline, default if spec.baseline is not None else None):
            if other is not None and other.status == "ok" and not _confirmation_of(result, other):
                confirm_config(spec, backend, result, other, out_dir, echo)
    result.best = best
    result.best_command = command_line(spec, best.config)
    best_rep = _repeat_of(result, best)
    base_rep = _repeat_of(result, baseline)
    b_val = _value(result, best)
    base_val = _value(result, baseline)
    if b_val and base_val:
        result.gain_over_baseline = b_val / base_val - 1.0
    d_val = _value(result, default)
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
        result.warnings += _roomier_neighbours(result, best)
    result.status = "complete"
    result.verdict = _verdict(spec, result, b_val, base_val, best_rep, base_rep, d_val)
    if measure_more and result.confirmations:
        result.verdict += _confirmed_text(spec, result)
    return result


def _repeat_of(result: TuneResult, trial: TrialRecord | None) -> Repeat | None:
    if trial is None:
        return None
    return next((r for r in result.repeats if _key(r.params) == _key(trial.params)), None)


def _confirmation_of(result: TuneResult, trial: TrialRecord | None) -> Confirmation | None:
    if trial is None:
        return None
    return next((c for c in result.confirmations if _key(c.params) == _key(trial.params)), None)


def _value(result: TuneResult, trial: TrialRecord | None) -> float | None:
    """A configuration's objective: the median of its repeats, or its one measurement — no
    higher than the rate it held on the longer probe, when it was checked there."""
    if trial is None:
        return None
    rep = _repeat_of(result, trial)
    if rep is not None and rep.median:
        v: float | None = rep.median
    else:
        v = trial.value if trial.status == "ok" else None
    conf = _confirmation_of(result, trial)
    if v is not None and conf is not None and conf.sustained is not None:
        v = min(v, conf.sustained)
    return v


def _score(result: TuneResult, rep: Repeat | None, trial: TrialRecord) -> float:
    """What the best is chosen by: median − k·MAD of its repeats (its one measurement when
    not repeated), no higher than what it held on the longer probe (0 when the engine failed
    there)."""
    base = rep.score if rep is not None and rep.score is not None else (trial.value or 0.0)
    conf = _confirmation_of(result, trial)
    if conf is not None:
        base = min(base, conf.sustained or 0.0)
    return base


def confirm_config(
    spec: TuneSpec,
    backend: Backend,
    result: TuneResult,
    trial: TrialRecord,
    out_dir: Path,
    echo: Callable[[str], None] = lambda _m: None,
) -> Confirmation:
    """TRIAL's reported SLO-max checked on a probe ``CONFIRM_LENGTH``× as long as the
    search's, with a draw of the workload neither the search nor the repeats used; stepping
    down (by ``1 + tol``) while it misses. A draw that meets the SLOs with a margin under
    its draw-to-draw noise (:func:`draw_noise`) is not taken alone: a second independent
    draw is measured at that rate, and the rate holds only when both meet. Appended to
    ``result.confirmations``."""
    reported = _value(result, trial) or trial.value or 0.0
    noise = draw_noise(result, trial)
    conf = Confirmation(
        params=trial.params,
        config=trial.config,
        reported=reported,
        length=CONFIRM_LENGTH,
        noise=noise,
    )
    seed = spec.workload.seed + max(spec.repeats, 1) * REPEAT_SEED_STEP
    seeds = [seed, seed + REPEAT_SEED_STEP]
    sub = out_dir / "confirm" / f"{trial.number:04d}"
    try:
        with backend.draws(trial.config, sub, seeds, length=CONFIRM_LENGTH) as (one, two):
            res = step_down(
                one, reported, tol=spec.tol, max_probes=spec.probes, again=two, noise=noise
            )
    except ServetuneError as exc:
        conf.note = engine_error_reason(exc)
    else:
        conf.probes = res.probes
        conf.draws = res.draws
        if res.error is not None:
            conf.note = res.error
        else:
            conf.sustained = res.slo_max or 0.0
            if conf.sustained < reported:
                conf.note = f"missed the SLOs at {reported:.3g} req/s: {res.limiting}"
    result.confirmations.append(conf)
    held = "failed" if conf.sustained is None else f"{conf.sustained:.3g}"
    on = " (2 draws)" if conf.sustained and conf.draws == 2 else ""
    echo(f"  {reported:.3g} → {held} req/s{on}  {config_text(trial.config)}")
    return conf


def _no_config_verdict(spec: TuneSpec, trials: list[TrialRecord]) -> str:
    slo = ", ".join(s.text() for s in spec.slos) or "the objective"
    tried = [t for t in trials if t.probes]
    if not tried:
        reasons = sorted({t.reason or t.status for t in trials})
        return f"No configuration could be measured ({len(trials)} tried): " + "; ".join(
            reasons[:3]
        )

    def closeness(t: TrialRecord) -> float:
        lowest = min(t.probes, key=lambda p: p.rate)
        return lowest.worst_ratio if lowest.worst_ratio is not None else float("inf")

    near = min(tried, key=closeness)
    lowest = min(near.probes, key=lambda p: p.rate)
    figures = ", ".join(
        f"{k} {v:.4g}" for k, v in lowest.figures.items() if v is not None and k.startswith("p")
    )
    return (
        f"No configuration meets the SLOs ({slo}) at any rate tried. Closest: trial "
        f"{near.number} {config_text(near.config)} at {lowest.rate:.3g} req/s — "
        f"limited by {lowest.limiting} ({(lowest.worst_ratio or 0):.2f}× its limit; {figures}). "
        "Relax that SLO, shorten the requests, or add GPUs."
    )


def _spread(rep: Repeat | None, shown: float | None = None) -> str:
    """The repeats behind a figure; when the figure SHOWN is below their median (the longer
    check lowered it), they are named as the shorter probes' so the two do not read as one."""
    if rep is None or rep.median is None:
        return ""
    vals = rep.measured
    spread = f"{len(vals)}: {min(vals):.3g}–{max(vals):.3g}"
    if shown is not None and shown < rep.median * (1 - 1e-9):
        text = f" (lowered by the longer check below; its shorter probes' median of {spread})"
    else:
        text = f" (median of {spread})"
    return text + (" UNSTABLE" if rep.unstable else "")


def _roomier_neighbours(result: TuneResult, best: TrialRecord) -> list[str]:
    """One-knob neighbours of the best that met the SLOs at its rate with clearly more room
    (their worst SLO under ``ROOMIER`` of the best's) and that the study never searched (the
    local refinement ran out of trials): they may serve more — said, not hidden."""
    rows = result.ofat
    mine = next((o for o in rows if o.direction == "best"), None)
    ratio = mine.figures.get(HEADROOM) if mine is not None else None
    if not ratio:
        return []
    searched = {_key(t.params) for t in result.trials if t.status != "rejected"}
    out = []
    for o in rows:
        theirs = o.figures.get(HEADROOM)
        if o.direction == "best" or o.status != "meets SLOs" or theirs is None:
            continue
        if _key({**best.params, o.knob: o.value}) in searched or theirs >= ROOMIER * ratio:
            continue
        out.append(
            f"{o.knob}={o.value} (one knob from the best) met the SLOs at "
            f"{result.ofat_rate or 0:.3g} req/s with its worst SLO at {theirs:.0%} of the limit "
            f"against the best's {ratio:.0%}, and was not searched: it may serve more (run tune "
            f"again with --baseline set to the best, or more --trials)"
        )
    return out


def _draws_text(conf: Confirmation) -> str:
    """On how many draws a rate held on the longer check, and why."""
    if conf.noise is None:  # a result written before the second draw
        return ""
    if conf.draws == 2:
        return (
            f" on two independent draws (the first met the SLOs within the draw-to-draw "
            f"noise, {conf.noise:.0%} of a limit)"
        )
    return (
        f" on one draw (it met the SLOs with a margin beyond the draw-to-draw noise, "
        f"{conf.noise:.0%} of a limit)"
    )


def _confirmed_text(spec: TuneSpec, result: TuneResult) -> str:
    """What the longer probes said of the figures reported."""
    wl = spec.workload
    parts = []
    for trial, who in ((result.best, "the best"), (result.baseline, spec.reference_label)):
        conf = _confirmation_of(result, trial)
        if conf is None or (who != "the best" and trial is result.best):
            continue
        if conf.sustained is None:
            parts.append(f"{who} FAILED on it ({conf.note})")
        elif conf.sustained == 0:
            parts.append(
                f"{who} held none of the rates tried there (from {conf.reported:.3g} req/s down)"
            )
        elif conf.sustained < conf.reported:
            parts.append(
                f"{who} held {conf.sustained:.3g} req/s there{_draws_text(conf)}, not the "
                f"{conf.reported:.3g} its shorter probes met: its figure is the lower"
            )
        else:
            parts.append(f"{who} held {conf.reported:.3g} req/s there{_draws_text(conf)}")
    if not parts:
        return ""
    size = (
        f"{wl.duration_s * CONFIRM_LENGTH:g} s"
        if wl.duration_s is not None
        else f"{wl.num_prompts * CONFIRM_LENGTH:,} requests"
    )
    return f" On a run {CONFIRM_LENGTH}× as long ({size}): " + "; ".join(parts) + "."


def _verdict(
    spec: TuneSpec,
    result: TuneResult,
    b_val: float | None,
    base_val: float | None,
    rep: Repeat | None,
    base_rep: Repeat | None = None,
    d_val: float | None = None,
) -> str:
    assert result.best is not None
    what = {
        "slo-max": "req/s within the SLOs",
        "goodput": "req/s of goodput",
        "throughput": "output tok/s",
        "pareto": "output tok/s",
    }[spec.objective]
    text = f"Best: {b_val:.3g} {what}{_spread(rep, b_val)} with {config_text(result.best.config)}"
    if result.best.role == "refine" and result.best.refined_from is not None:
        text += f" (found by the local refinement, one knob from trial {result.best.refined_from})"
    if rep is not None and rep.failed:
        text += f" — it FAILED in a repeat, as did every configuration repeated ({rep.note})"
    label = spec.reference_label
    if spec.baseline is not None and result.baseline is not None:
        label += f" ({config_text(result.baseline.config)})"
    baseline = result.baseline
    if baseline is not None and _key(result.best.params) == _key(baseline.params):
        return text + f": no configuration searched beat {label}."
    if result.gain_over_baseline is not None and base_val:
        spread = _spread(base_rep, base_val)
        text += f"; {label} serves {base_val:.3g}{spread} ({result.gain_over_baseline:+.0%}"
        if result.gain_beyond_noise is True:
            text += ", beyond the run-to-run spread)"
        elif result.gain_beyond_noise is False:
            text += ", within the run-to-run spread: not shown to be real)"
        else:
            text += ", not both measured twice or more: no spread to judge it by)"
    elif (
        baseline is not None
        and (held := _confirmation_of(result, baseline)) is not None
        and held.sustained == 0
    ):
        text += (
            f"; {label} met the SLOs at none of the rates tried on the longer check (its "
            f"shorter probes met {held.reported:.3g}{_spread(base_rep)}): no gain is figured"
        )
    elif baseline is not None and baseline.status != "ok":
        text += f"; {label} met the SLOs at no rate tried ({baseline.status})"
    elif baseline is None:
        text += f"; {label} was not measured (the study stopped before it)"
    default = result.default
    if (
        spec.baseline is not None
        and default is not None
        and default is not baseline
        and result.gain_over_default is not None
        and d_val
    ):
        text += f"; the engine's default serves {d_val:.3g} ({result.gain_over_default:+.0%})"
    return text + "."
