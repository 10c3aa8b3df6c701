"""Diagnose a sweep: every level as a run, then the curve as a whole — where the knee is,
which levels are past it (and whether their queue grows without bound), what limits the
capacity at the knee, and the seed's cost order as a plan (quantize → push GPU/KV use to
80%+ → rate-limit at the knee → only then add GPUs). The curve's findings come from
:mod:`~servetune.diagnose.sweep.knee` (the knee), :mod:`~servetune.diagnose.sweep.limit` (what
limits capacity) and :mod:`~servetune.diagnose.sweep.levels` (a level past the knee agrees)."""

from __future__ import annotations

from pathlib import Path

from servetune.diagnose.actions.table import PROCEDURE
from servetune.diagnose.conditions import fmt_num
from servetune.diagnose.evaluate import rank
from servetune.diagnose.failures import sweep_failure_finding
from servetune.diagnose.knobs import KnownConfig
from servetune.diagnose.model import Diagnosis, Finding, LevelDiagnosis
from servetune.diagnose.run import diagnose_run
from servetune.diagnose.sweep.knee import is_past_knee, knee_status_finding, past_knee_finding
from servetune.diagnose.sweep.levels import agree_with_the_curve
from servetune.diagnose.sweep.limit import limit_finding
from servetune.errors import ResultError, ServetuneError
from servetune.results.io import RUN_FILE
from servetune.results.sweep_schema import Knee, LevelRow
from servetune.sweep.reading import open_sweep

LEVEL_WARNINGS = ("client_behind", "oom", "server_gone", "prefix_cache_inflated")
"""Warnings of one level that the curve's diagnosis repeats."""


def _level_diag(sweep_dir: Path, row: LevelRow, config: KnownConfig | None) -> Diagnosis | None:
    d = sweep_dir / row.level_dir
    if not (d / RUN_FILE).is_file():
        return None
    try:
        return diagnose_run(d, config)
    except ServetuneError:
        return None


def _headline(findings: list[Finding], knee: Knee | None) -> str:
    parts: list[str] = []
    if knee is not None and knee.status == "found":
        parts.append(
            f"knee ≈ {fmt_num(round(knee.throughput or 0, 2))} req/s"
            + (
                f" (comfortable concurrency ≈ {fmt_num(round(knee.concurrency))})"
                if knee.concurrency
                else ""
            )
        )
    past = next((f for f in findings if f.rule == "past_knee"), None)
    if past is not None:
        parts.append(past.title.split(" are past the knee")[0].replace("Levels", "levels"))
        parts[-1] += " past it"
        if past.figures.get("growing_levels"):
            # Say where the queue runs away: past the knee is not yet past capacity.
            start = fmt_num(past.figures.get("first_growing_load", 0.0))
            at = (
                f"concurrency {start}" if past.figures.get("concurrency_mode") else f"{start} req/s"
            )
            parts[-1] += f" (waiting grows without bound from {at})"
    limit = next((f for f in findings if f.rule == "capacity_limit"), None)
    if limit is not None:
        what = limit.title.split(": ", 1)[-1]
        line = "limit: " + what[:1].lower() + what[1:]
        first = next((a for a in limit.actions), None)
        if first is not None:
            line += f" → {first.title}"
        parts.append(line)
    if not parts and findings:
        return findings[0].title
    return "; ".join(parts)


def diagnose_sweep(sweep_dir: str | Path, config: KnownConfig | None = None) -> Diagnosis:
    """Per level and for the curve as a whole."""
    d = Path(sweep_dir).expanduser()
    sweep = open_sweep(d)  # a sweep cut short: its partial level summarised from its records
    if not sweep.rows:
        raise ResultError(
            f"{d / 'sweep.json'} has no finished level yet",
            hint="wait for the first level to end, or resume the sweep",
        )
    knee = sweep.knee
    levels: list[LevelDiagnosis] = []
    pairs: list[tuple[LevelRow, Diagnosis | None]] = []
    notes: list[str] = []
    for row in sweep.measured_rows():
        diag = _level_diag(d, row, config)
        pairs.append((row, diag))
        if diag is None:
            notes.append(f"{row.label}: no readable run directory ({row.level_dir})")
        level_findings = (
            [f.model_copy(update={"scope": "level", "level": row.label}) for f in diag.findings]
            if diag
            else []
        )
        headline = diag.headline if diag else "no run directory"
        if diag is not None and knee is not None and is_past_knee(row, knee):
            level_findings, headline = agree_with_the_curve(row, knee, level_findings, headline)
        levels.append(
            LevelDiagnosis(
                label=row.label,
                load=None if row.load == float("inf") else row.load,
                mode=row.mode,
                past_knee=is_past_knee(row, knee),
                headline=headline,
                findings=level_findings,
            )
        )
    findings: list[Finding] = []
    failed = sweep_failure_finding(sweep.measured_rows())
    if failed is not None:
        findings.append(failed)
    # Only complete levels speak for the curve (a failing level measured its failures).
    good = [(r, dg) for r, dg in pairs if r.status == "complete"]
    status = knee_status_finding(sweep, knee) if good or failed is None else None
    if status is not None:
        findings.append(status)
    if knee is not None and knee.status == "found":
        past = [(r, dg) for r, dg in good if is_past_knee(r, knee)]
        if past:
            findings.append(past_knee_finding(sweep, knee, past))
    limit = limit_finding(sweep, knee, good) if good else None
    if limit is not None:
        findings.append(limit)
    # Warnings found on any level (client behind, OOM, failures, a level that measured the
    # prefix cache) are the curve's too.
    for row, diag in pairs:
        for f in diag.findings if diag else []:
            if f.kind == "warning" and f.rule in LEVEL_WARNINGS:
                findings.append(
                    f.model_copy(
                        update={
                            "scope": "level",
                            "level": row.label,
                            "title": f"{row.label}: {f.title}",
                        }
                    )
                )
    findings = rank(findings)
    healthy = not any(f.kind in ("bottleneck", "warning") for f in findings)
    if sweep.status in ("cut_short", "running"):
        notes.insert(0, sweep.warnings[0])
    return Diagnosis(
        kind="sweep",
        path=str(d),
        headline=("(cut short) " if sweep.status == "cut_short" else "")
        + (_headline(findings, knee) if findings else "no finding"),
        healthy=healthy,
        findings=findings,
        levels=levels,
        knobs=dict(next((dg.knobs for _, dg in pairs if dg is not None), {})),
        procedure=list(PROCEDURE),
        notes=notes,
    )
