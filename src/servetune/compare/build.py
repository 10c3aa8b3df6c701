"""From the paths the user gave to a :class:`~servetune.compare.model.CompareReport`.

The first input is the baseline A; every other one is compared with it. Any mix of runs and
sweeps is accepted: two runs are compared as runs, two sweeps as sweeps, and a run against a
sweep is compared with the sweep's level at the run's load (or refused, naming the loads the
sweep has).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path

from servetune.compare.inputs import RunInput, SweepInput, load
from servetune.compare.model import CompareReport, PairComparison
from servetune.compare.runs import compare_runs
from servetune.compare.signflip import DEFAULT_REPLICATES
from servetune.compare.sweeps import compare_sweeps
from servetune.errors import ConfigError, ResultError
from servetune.results.schema import RunResult, Slo


def _run_load(r: RunResult) -> tuple[str, float]:
    c = r.config
    if math.isinf(c.request_rate) and c.max_concurrency is not None:
        return "concurrency", float(c.max_concurrency)
    return "rate", c.request_rate


def level_for(run: RunInput, sweep: SweepInput) -> RunInput:
    """The sweep's level at the run's load, as a run."""
    mode, value = _run_load(run.result)
    rows = [r for r in sweep.result.rows if r.role == "level" and r.mode == mode]
    for row in sorted(rows, key=lambda r: r.label):
        if math.isclose(row.load, value, rel_tol=1e-9) or (
            math.isinf(row.load) and math.isinf(value)
        ):
            return sweep.level_run(row)
    loads = ", ".join(f"{x:g}" for x in sorted({r.load for r in rows})) or "none"
    what = "req/s" if mode == "rate" else "concurrency"
    raise ConfigError(
        f"{run.label} ran at {value:g} {what}, a load sweep {sweep.label} did not run "
        f"(its levels: {loads})",
        hint="compare the run with a run at the same load, or two sweeps",
    )


def build(
    paths: Sequence[str | Path],
    slo: Slo | None = None,
    *,
    force: bool = False,
    replicates: int | None = None,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> CompareReport:
    if len(paths) < 2:
        raise ConfigError(
            "compare needs at least two results (A and B)",
            hint="servetune compare RUN_A RUN_B, or SWEEP_A SWEEP_B",
        )
    inputs = [load(p) for p in paths]
    names = [str(p) for p in paths]
    for inp, name in zip(inputs, names, strict=True):
        inp.name = name
    report = CompareReport(inputs=names)
    base = inputs[0]
    say = progress or (lambda _msg: None)
    for other in inputs[1:]:
        say(f"comparing {base.label} with {other.label}")
        if isinstance(base, SweepInput) and isinstance(other, SweepInput):
            report.sweeps.append(
                compare_sweeps(
                    base, other, slo, force=force, seed=seed, replicates=replicates or 1000
                )
            )
            continue
        a = base if isinstance(base, RunInput) else None
        b = other if isinstance(other, RunInput) else None
        if a is None and b is not None and isinstance(base, SweepInput):
            a = level_for(b, base)
        if b is None and a is not None and isinstance(other, SweepInput):
            b = level_for(a, other)
        if a is None or b is None:  # pragma: no cover - every mix is handled above
            raise ResultError("cannot pair these inputs")
        report.pairs.append(
            compare_runs(
                a, b, slo, force=force, seed=seed, replicates=replicates or DEFAULT_REPLICATES
            )
        )
    first: PairComparison | None = report.pairs[0] if report.pairs else None
    if first is not None:
        report.figures = first.figures
    verdicts = [p.verdict for p in report.pairs] + [s.verdict for s in report.sweeps]
    report.verdict = (
        verdicts[0]
        if len(verdicts) == 1
        else " | ".join(f"{i + 2}: {v}" for i, v in enumerate(verdicts))
    )
    return report


def comparable(report: CompareReport) -> bool:
    return all(p.comparable for p in report.pairs) and all(s.comparable for s in report.sweeps)
