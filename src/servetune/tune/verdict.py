"""The verdict: the study's result in words — the best and its figure (and the repeats behind
it), the gain over the baseline and whether it is beyond the run-to-run spread, what held on
the longer check and on how many draws; or, when no configuration met the SLOs, the closest
one and what limited it."""

from __future__ import annotations

from servetune.results.tune_file import (
    Confirmation,
    Repeat,
    TrialRecord,
    TuneResult,
    TuneSpec,
    config_text,
)
from servetune.tune.confirm import CONFIRM_LENGTH
from servetune.tune.figures import confirmation_of
from servetune.tune.space import params_key


def no_config_verdict(spec: TuneSpec, trials: list[TrialRecord]) -> str:
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


def spread_text(rep: Repeat | None, shown: float | None = None) -> str:
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


def draws_text(conf: Confirmation) -> str:
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


def confirmed_text(spec: TuneSpec, result: TuneResult) -> str:
    """What the longer probes said of the figures reported."""
    wl = spec.workload
    parts = []
    for trial, who in ((result.best, "the best"), (result.baseline, spec.reference_label)):
        conf = confirmation_of(result, trial)
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
                f"{who} held {conf.sustained:.3g} req/s there{draws_text(conf)}, not the "
                f"{conf.reported:.3g} its shorter probes met: its figure is the lower"
            )
        else:
            parts.append(f"{who} held {conf.reported:.3g} req/s there{draws_text(conf)}")
    if not parts:
        return ""
    size = (
        f"{wl.duration_s * CONFIRM_LENGTH:g} s"
        if wl.duration_s is not None
        else f"{wl.num_prompts * CONFIRM_LENGTH:,} requests"
    )
    return f" On a run {CONFIRM_LENGTH}× as long ({size}): " + "; ".join(parts) + "."


def verdict_text(
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
    text = (
        f"Best: {b_val:.3g} {what}{spread_text(rep, b_val)} with {config_text(result.best.config)}"
    )
    if result.best.role == "refine" and result.best.refined_from is not None:
        text += f" (found by the local refinement, one knob from trial {result.best.refined_from})"
    if rep is not None and rep.failed:
        text += f" — it FAILED in a repeat, as did every configuration repeated ({rep.note})"
    label = spec.reference_label
    if spec.baseline is not None and result.baseline is not None:
        label += f" ({config_text(result.baseline.config)})"
    baseline = result.baseline
    if baseline is not None and params_key(result.best.params) == params_key(baseline.params):
        return text + f": no configuration searched beat {label}."
    if result.gain_over_baseline is not None and base_val:
        spread = spread_text(base_rep, base_val)
        text += f"; {label} serves {base_val:.3g}{spread} ({result.gain_over_baseline:+.0%}"
        if result.gain_beyond_noise is True:
            text += ", beyond the run-to-run spread)"
        elif result.gain_beyond_noise is False:
            text += ", within the run-to-run spread: not shown to be real)"
        else:
            text += ", not both measured twice or more: no spread to judge it by)"
    elif (
        baseline is not None
        and (held := confirmation_of(result, baseline)) is not None
        and held.sustained == 0
    ):
        text += (
            f"; {label} met the SLOs at none of the rates tried on the longer check (its "
            f"shorter probes met {held.reported:.3g}{spread_text(base_rep)}): no gain is figured"
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
