"""The longer check: a reported SLO-max measured again on a probe ``CONFIRM_LENGTH``× as long
as the search's, with a draw of the workload neither the search nor the repeats used,
stepping down while it misses; a draw that meets the SLOs with a margin under the
draw-to-draw noise is drawn again, and the rate holds only when both meet."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path

from servetune.errors import ServetuneError
from servetune.results.tune_file import (
    Confirmation,
    TrialRecord,
    TuneResult,
    TuneSpec,
    config_text,
)
from servetune.tune.backends import Backend, engine_error_reason
from servetune.tune.figures import repeat_of, value_of
from servetune.tune.repeats import REPEAT_SEED_STEP
from servetune.tune.search import step_down

CONFIRM_LENGTH = 4
"""The reported SLO-max is checked on a probe this many times as long as the search's."""


NOISE_FLOOR = 0.02
"""A draw-to-draw noise measured on a few draws is itself uncertain (the standard deviation
of three spans 0.2–2.4× the true one, 90% of the time): a margin under 2% is always drawn
again."""


DEFAULT_NOISE = 0.05
"""Without repeats to measure it: the P99 TPOT of 4,000 requests spread 4–9% from draw to
draw on the simulated engine (Llama-3.1-8B / H100 at 0.68–0.93× its saturation)."""


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
    rep = repeat_of(result, trial)
    got = rep.edge_ratios if rep is not None else []
    if len(got) < 2:
        return DEFAULT_NOISE
    return max(statistics.stdev(got), NOISE_FLOOR)


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
    reported = value_of(result, trial) or trial.value or 0.0
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
