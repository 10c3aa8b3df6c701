"""What limits a sweep's capacity, from the levels that matter (the first measured levels past
the knee, else the first saturated ones), with the seed's cost order as the plan: quantize →
push GPU/KV use to 80%+ → rate-limit at the knee → only then add GPUs."""

from __future__ import annotations

from servetune.diagnose.actions.build import build_action
from servetune.diagnose.conditions import fmt_num
from servetune.diagnose.figures.table import Figures
from servetune.diagnose.limiter import compute_near_ceiling
from servetune.diagnose.model import Diagnosis, Finding
from servetune.diagnose.rules import CAUSES
from servetune.diagnose.sweep.knee import is_past_knee, knee_action
from servetune.results.sweep_schema import Knee, LevelRow, SweepResult

SWEEP_CAUSES = (*CAUSES, "kv_near_full")
"""On a curve, a pool at its edge past the knee is the limit too."""
KV_TARGET = 0.8
"""The seed's cost order, step 2: push GPU/KV use to 80%+."""


def limit_finding(
    sweep: SweepResult,
    knee: Knee | None,
    levels: list[tuple[LevelRow, Diagnosis | None]],
) -> Finding | None:
    """What limits the capacity, from the levels that matter: the first two measured levels
    past the knee (else the first saturated ones) — never the unbounded probe alone, whose
    queue grows without bound by construction — and the seed's cost order as the plan."""
    measured = [(r, d) for r, d in levels if d is not None and r.role != "probe"]
    past = [(r, d) for r, d in measured if is_past_knee(r, knee)]
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
        compute_limited = over is not None and compute_near_ceiling(diag.figures)
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
        elif cause is None and over is not None and compute_near_ceiling(diag.figures):
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
        actions.append(knee_action(knee, sweep.config.mode))
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
