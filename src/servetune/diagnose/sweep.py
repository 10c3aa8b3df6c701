"""Diagnose a sweep: every level as a run, then the curve as a whole — where the knee is,
which levels are past it (and whether their queue grows without bound), what limits the
capacity at the knee, and the seed's cost order as a plan (quantize → push GPU/KV use to
80%+ → rate-limit at the knee → only then add GPUs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from servetune.diagnose.action_build import build_action
from servetune.diagnose.actions import PROCEDURE
from servetune.diagnose.conditions import fmt_ms, fmt_num
from servetune.diagnose.evaluate import diagnose_run, rank
from servetune.diagnose.failures import sweep_failure_finding
from servetune.diagnose.figure_table import Figures
from servetune.diagnose.knobs import KnownConfig
from servetune.diagnose.model import Action, Diagnosis, Finding, LevelDiagnosis
from servetune.diagnose.rules import CAUSES, NEAR_CEILING
from servetune.errors import ResultError, ServetuneError
from servetune.results.io import RUN_FILE
from servetune.results.sweep_schema import Knee, LevelRow, SweepResult
from servetune.sweep.reading import open_sweep

SWEEP_CAUSES = (*CAUSES, "kv_near_full")
"""On a curve, a pool at its edge past the knee is the limit too."""
METRIC_NAMES = {"ttft": "TTFT", "tpot": "TPOT", "e2el": "E2E"}
KV_TARGET = 0.8
"""The seed's cost order, step 2: push GPU/KV use to 80%+."""


LEVEL_WARNINGS = ("client_behind", "oom", "server_gone", "prefix_cache_inflated")
"""Warnings of one level that the curve's diagnosis repeats."""


def _near_ceiling(diag: Diagnosis) -> bool:
    share = diag.figures.get("compute_of_ceiling")
    return share is not None and share >= NEAR_CEILING


def _load_text(row: LevelRow) -> str:
    if row.mode == "concurrency":
        return f"concurrency {row.concurrency}"
    rate = row.offered_rate
    return "rate inf" if rate is None or rate == float("inf") else f"{fmt_num(rate)} req/s"


def _unit(mode: str) -> str:
    return "" if mode == "concurrency" else " req/s"


def _past(row: LevelRow, knee: Knee | None) -> bool | None:
    if knee is None or knee.status != "found" or knee.offered is None:
        return None
    return row.load > knee.offered * 1.0001


def _level_diag(sweep_dir: Path, row: LevelRow, config: KnownConfig | None) -> Diagnosis | None:
    d = sweep_dir / row.level_dir
    if not (d / RUN_FILE).is_file():
        return None
    try:
        return diagnose_run(d, config)
    except ServetuneError:
        return None


def _past_knee_finding(
    sweep: SweepResult, knee: Knee, past: list[tuple[LevelRow, Diagnosis | None]]
) -> Finding:
    mode = sweep.config.mode
    first = past[0][0]
    growing = [r for r, d in past if d is not None and d.finding("overloaded") is not None]
    what: list[str] = []
    if growing:
        labels = ", ".join(_load_text(r) for r in growing)
        what.append(f"waiting grows without bound at {labels}")
    metric = knee.binding_metric or "ttft"
    measured = [r for r, _ in past if r.role != "probe"]
    top = measured[-1] if measured else past[-1][0]
    top_p99 = top.p99(metric)
    knee_p99 = knee.latency_p99_ms.get(metric)
    if top_p99 is not None and knee_p99:
        what.append(
            f"P99 {METRIC_NAMES[metric]} {fmt_ms(knee_p99)} at the knee → {fmt_ms(top_p99)} at "
            f"{_load_text(top)}"
        )
    at = fmt_num(round(knee.offered or 0, 2))
    offered = f"concurrency ≈ {at}" if mode == "concurrency" else f"≈ {at} req/s offered"
    title = (
        f"Levels ≥ {_load_text(first)} are past the knee ({offered}, "
        f"{fmt_num(round(knee.throughput or 0, 2))} req/s served)"
    )
    if what:
        title += ": " + "; ".join(what)
    evidence = list(knee.evidence)
    for row, diag in past:
        line = (
            f"{row.label}: {fmt_num(row.request_throughput)} req/s, P99 TTFT "
            f"{fmt_ms(row.ttft_p99 or 0)}, P99 TPOT {fmt_ms(row.tpot_p99 or 0)}"
        )
        over = diag.finding("overloaded") if diag else None
        if over is not None:
            growth = over.figures.get("inflight_growth_per_s")
            if growth is not None:
                line += f"; requests in flight {growth:+.2f}/s"
        if row.server and row.server.waiting_mean is not None:
            line += f"; mean waiting {fmt_num(row.server.waiting_mean)}"
        evidence.append(line)
    actions = [_knee_action(knee, mode)]
    return Finding(
        rule="past_knee",
        kind="bottleneck",
        scope="curve",
        title=title,
        seed="P99 latency shoots up → past the comfortable concurrency → lower the concurrency "
        "cap or rate-limit; the knee is the comfortable concurrency",
        confidence=knee.confidence or "medium",
        priority=95,
        evidence=evidence,
        actions=actions,
        figures={
            "knee_offered": float(knee.offered or 0),
            "knee_throughput": float(knee.throughput or 0),
            "past_levels": float(len(past)),
            "growing_levels": float(len(growing)),
            "first_growing_load": float(growing[0].load) if growing else 0.0,
            "concurrency_mode": 1.0 if mode == "concurrency" else 0.0,
        },
    )


def _knee_action(knee: Knee, mode: str) -> Action:
    metric = knee.binding_metric or "ttft"
    p99 = knee.latency_p99_ms.get(metric)
    conc = knee.concurrency
    extra: dict[str, Any] = {
        "knee_rate": fmt_num(round(knee.throughput or 0, 2)),
        "knee_conc": fmt_num(round(conc)) if conc is not None else "?",
        "knee_p99": f"{fmt_ms(p99)} ({METRIC_NAMES[metric]})" if p99 is not None else "the knee's",
    }
    action = build_action("rate_limit_at_knee", Figures(), extra)
    assert action is not None
    action.to_value = round(knee.throughput or 0, 3)
    if mode == "concurrency" and conc is not None:
        action.title += f"; in a closed loop cap concurrency at ≈ {fmt_num(round(conc))}"
    return action


def _limit_finding(
    sweep: SweepResult,
    knee: Knee | None,
    levels: list[tuple[LevelRow, Diagnosis | None]],
) -> Finding | None:
    """What limits the capacity, from the levels that matter: the first two measured levels
    past the knee (else the first saturated ones) — never the unbounded probe alone, whose
    queue grows without bound by construction — and the seed's cost order as the plan."""
    measured = [(r, d) for r, d in levels if d is not None and r.role != "probe"]
    past = [(r, d) for r, d in measured if _past(r, knee)]
    saturated = [(r, d) for r, d in measured if d.finding("overloaded")]
    candidates = (past or saturated)[:2]
    probes = [(r, d) for r, d in levels if d is not None and r.role == "probe"]
    if not candidates:
        if not probes:
            return None
        return _probe_only_finding(probes[0][0], probes[0][1])

    def cause_of(diag: Diagnosis | None) -> Finding | None:
        if diag is None:
            return None
        return next(
            (f for f in diag.findings if f.rule in SWEEP_CAUSES and f.kind != "cannot_tell"),
            None,
        )

    # The first level around the knee that shows a cause; else the first that saturated (its
    # limiter: the levels just past a knee often still keep up, and say nothing of what
    # stops the server); else the first one.
    row, diag = next(
        ((r, d) for r, d in candidates if cause_of(d)),
        next(
            ((r, d) for r, d in [*candidates, *saturated] if d.finding("overloaded")),
            candidates[0],
        ),
    )
    assert diag is not None
    cause = cause_of(diag)
    over = diag.finding("overloaded")
    if cause is not None:
        limiter = cause.title
        base_actions = list(cause.actions)
    elif over is not None and over.cause:
        limiter = over.cause
        base_actions = [a for a in over.actions if a.cost_step < 3]
    else:
        limiter = "not identified from the metrics available"
        base_actions = []
    kv = diag.figures.get("kv_mean")
    status: list[str] = []
    quantized = diag.figures.get("quantized")
    if quantized is not None:
        line = "step 1 quantize: " + ("done" if quantized else "open (weights are bf16)")
        compute_limited = over is not None and _near_ceiling(diag)
        no_quant = not any(a.knob == "quantization" for a in base_actions)
        if not quantized and compute_limited and cause is None and no_quant:
            line += (
                " — but on this GPU (no fp8 tensor cores) int4 weights would not lift a "
                "compute limit"
            )
        status.append(line)
    if kv is not None:
        line = f"step 2 push KV use to 80%+: KV mean {kv:.0%} at {row.label}"
        if kv >= KV_TARGET:
            line += " — reached"
        elif cause is None and over is not None and _near_ceiling(diag):
            line += " — but compute is the limit: a bigger batch adds no throughput here"
        elif cause is not None and cause.rule == "batch_capped":
            line += " — the --max-num-seqs cap holds it down (see the first action)"
        status.append(line)
    if knee is not None and knee.status == "found":
        status.append(
            f"step 3 rate-limit at the knee: ≈ {fmt_num(round(knee.throughput or 0, 2))} req/s"
        )
    status.append("step 4 add GPUs: only after steps 1–3")
    actions = list(base_actions)
    if knee is not None and knee.status == "found":
        actions.append(_knee_action(knee, sweep.config.mode))
    add = next(
        (a for f in diag.findings for a in f.actions if a.id == "add_gpus"),
        None,
    )
    if add is None:
        tp = diag.knobs.get("tensor_parallel_size")
        add = build_action(
            "add_gpus",
            Figures(values={"tensor_parallel_size": float(tp)} if tp else {}),
        )
    if add is not None and all(a.id != "add_gpus" for a in actions):
        actions.append(add)
    actions.sort(key=lambda a: a.cost_step or 2.5)
    return Finding(
        rule="capacity_limit",
        kind="bottleneck",
        scope="curve",
        level=row.label,
        title=f"What limits capacity (at {row.label}): {limiter}",
        seed="cost order: 1) quantize; 2) push GPU/KV use to 80%+; 3) rate-limit at the knee; "
        "4) only then add GPUs",
        confidence=(cause.confidence if cause else (over.confidence if over else "low")),
        priority=93,
        evidence=status + (cause.evidence if cause else (over.evidence if over else [])),
        actions=actions,
        figures=dict(cause.figures if cause else (over.figures if over else {})),
    )


def _probe_only_finding(row: LevelRow, diag: Diagnosis | None) -> Finding:
    """Only the unbounded probe saturated: it says how much the server completes, not what
    limits it at a load anyone would run."""
    shown = next((f.title for f in (diag.verdicts() if diag else [])), None)
    evidence = [f"{row.label} (every request at once) shows: {shown}"] if shown else []
    return Finding(
        rule="capacity_limit",
        kind="cannot_tell",
        scope="curve",
        level=row.label,
        title="What limits capacity: cannot tell — no measured level saturated; only the "
        "unbounded probe did, and a queue without bound fills any pool",
        seed="cost order: find the limit at the knee before changing anything",
        confidence="low",
        priority=93,
        evidence=evidence,
        missing=["a measured level at or past the knee (sweep higher rates)"],
    )


def _knee_status_finding(sweep: SweepResult, knee: Knee | None) -> Finding | None:
    mode = sweep.config.mode
    rows = sweep.measured_rows()
    if knee is None:
        return Finding(
            rule="knee",
            kind="cannot_tell",
            scope="curve",
            title="No knee: the sweep has no analysed curve yet",
            missing=["sweep.json has no knee (too few finished levels)"],
        )
    suggest = ", ".join(fmt_num(x) for x in knee.suggested_loads)
    if knee.status == "above_range":
        top = rows[-1] if rows else None
        action = build_action("add_load", Figures())
        assert action is not None
        if suggest:
            action.title = f"sweep further up: {suggest}{_unit(mode)}"
        return Finding(
            rule="knee_not_reached",
            kind="bottleneck",
            scope="curve",
            title="The sweep never reached the knee: up to "
            + (_load_text(top) if top else "the highest level")
            + " latency stayed flat — the server can take more load",
            seed="KV use long below 50% and low GPU use → not enough load",
            confidence=knee.confidence or "medium",
            priority=70,
            evidence=[knee.verdict, *knee.evidence],
            actions=[action],
        )
    if knee.status == "below_range":
        return Finding(
            rule="knee_below_range",
            kind="warning",
            scope="curve",
            title="Even the lowest level is past the knee: the sweep started too high"
            + (f" — sweep {suggest}{_unit(mode)}" if suggest else ""),
            confidence=knee.confidence or "medium",
            priority=72,
            evidence=[knee.verdict, *knee.evidence],
        )
    if knee.status in ("no_clear_knee", "insufficient"):
        return Finding(
            rule="knee",
            kind="cannot_tell",
            scope="curve",
            title=f"Knee: cannot tell — {knee.verdict or knee.status}",
            evidence=list(knee.evidence),
            missing=[knee.verdict or knee.status],
        )
    return None


CONTRADICT_PAST_KNEE = ("under_loaded", "healthy", "knee_not_reached")
"""A level's own verdicts that the curve contradicts once the level is past the knee."""


def _agree_with_the_curve(
    row: LevelRow, knee: Knee, findings: list[Finding], headline: str
) -> tuple[list[Finding], str]:
    """A level past the knee is not "not enough load" nor "healthy": its latency already
    rose past the comfortable point. Its own verdicts that say otherwise give way to that."""
    metric = knee.binding_metric or "ttft"
    at_knee = knee.latency_p99_ms.get(metric)
    here = row.p99(metric)
    rising = (
        f": P99 {METRIC_NAMES[metric]} {fmt_ms(here)} here against {fmt_ms(at_knee)} at the knee"
        if here is not None and at_knee
        else ""
    )
    findings, headline = _limit_at_the_knee(knee, row.mode, findings, headline)
    dropped = [f.rule for f in findings if f.rule in CONTRADICT_PAST_KNEE]
    kept = [f for f in findings if f.rule not in CONTRADICT_PAST_KNEE]
    if not dropped:
        return findings, headline
    mine = Finding(
        rule="past_knee",
        kind="bottleneck",
        scope="level",
        level=row.label,
        title=f"Past the knee of the curve ({_load_text(row)}){rising} — more load here buys "
        "latency, not throughput",
        seed="P99 latency shoots up → past the comfortable concurrency",
        confidence=knee.confidence or "medium",
        priority=94,
        evidence=[
            f"the curve's knee is at ≈ {fmt_num(round(knee.offered or 0, 2))}"
            + (" concurrency" if row.mode == "concurrency" else " req/s offered"),
            "this level's own metrics alone said: "
            + "; ".join(f.title for f in findings if f.rule in dropped and f.kind != "healthy")
            if any(f.kind != "healthy" for f in findings if f.rule in dropped)
            else "this level's own metrics alone showed no bottleneck",
        ],
    )
    kept = rank([mine, *kept])
    top = kept[0]
    new_headline = top.title + (
        f" → {top.actions[0].title}"
        if top.kind in ("bottleneck", "warning") and top.actions
        else ""
    )
    return kept, new_headline


def _limit_at_the_knee(
    knee: Knee, mode: str, findings: list[Finding], headline: str
) -> tuple[list[Finding], str]:
    """A level that saturated guesses a rate limit from itself alone (75% of what it
    completed); on a curve the knee is known, and the limit is the knee's — one figure in
    the whole diagnosis."""
    at_knee = _knee_action(knee, mode)
    out: list[Finding] = []
    for f in findings:
        guessed = [a for a in f.actions if a.id == "rate_limit"]
        if not guessed:
            out.append(f)
            continue
        actions = [at_knee if a.id == "rate_limit" else a for a in f.actions]
        out.append(f.model_copy(update={"actions": actions}))
        headline = headline.replace(guessed[0].title, at_knee.title)
    return out, headline


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
            hint="wait for the first level to end, or resume the sweep with --resume",
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
        if diag is not None and knee is not None and _past(row, knee):
            level_findings, headline = _agree_with_the_curve(row, knee, level_findings, headline)
        levels.append(
            LevelDiagnosis(
                label=row.label,
                load=None if row.load == float("inf") else row.load,
                mode=row.mode,
                past_knee=_past(row, knee),
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
    status = _knee_status_finding(sweep, knee) if good or failed is None else None
    if status is not None:
        findings.append(status)
    if knee is not None and knee.status == "found":
        past = [(r, dg) for r, dg in good if _past(r, knee)]
        if past:
            findings.append(_past_knee_finding(sweep, knee, past))
    limit = _limit_finding(sweep, knee, good) if good else None
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
