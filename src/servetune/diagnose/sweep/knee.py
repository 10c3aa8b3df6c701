"""A sweep's knee as findings: where the knee is (or why it cannot be told), which levels are
past it and whether their queue grows without bound, and the rate limit at the knee as an
action — shared by the capacity limit and by the levels that agree with the curve."""

from __future__ import annotations

from typing import Any

from servetune.diagnose.actions.build import build_action
from servetune.diagnose.conditions import fmt_ms, fmt_num
from servetune.diagnose.figures.table import Figures
from servetune.diagnose.model import Action, Diagnosis, Finding
from servetune.results.sweep_schema import Knee, LevelRow, SweepResult
from servetune.sweep.fmt import METRIC_NAMES


def load_text(row: LevelRow) -> str:
    if row.mode == "concurrency":
        return f"concurrency {row.concurrency}"
    rate = row.offered_rate
    return "rate inf" if rate is None or rate == float("inf") else f"{fmt_num(rate)} req/s"


def _unit(mode: str) -> str:
    return "" if mode == "concurrency" else " req/s"


def is_past_knee(row: LevelRow, knee: Knee | None) -> bool | None:
    if knee is None or knee.status != "found" or knee.offered is None:
        return None
    return row.load > knee.offered * 1.0001


def past_knee_finding(
    sweep: SweepResult, knee: Knee, past: list[tuple[LevelRow, Diagnosis | None]]
) -> Finding:
    mode = sweep.config.mode
    first = past[0][0]
    growing = [r for r, d in past if d is not None and d.finding("overloaded") is not None]
    what: list[str] = []
    if growing:
        labels = ", ".join(load_text(r) for r in growing)
        what.append(f"waiting grows without bound at {labels}")
    metric = knee.binding_metric or "ttft"
    measured = [r for r, _ in past if r.role != "probe"]
    top = measured[-1] if measured else past[-1][0]
    top_p99 = top.p99(metric)
    knee_p99 = knee.latency_p99_ms.get(metric)
    if top_p99 is not None and knee_p99:
        what.append(
            f"P99 {METRIC_NAMES[metric]} {fmt_ms(knee_p99)} at the knee → {fmt_ms(top_p99)} at "
            f"{load_text(top)}"
        )
    at = fmt_num(round(knee.offered or 0, 2))
    offered = f"concurrency ≈ {at}" if mode == "concurrency" else f"≈ {at} req/s offered"
    title = (
        f"Levels ≥ {load_text(first)} are past the knee ({offered}, "
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
    actions = [knee_action(knee, mode)]
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


def knee_action(knee: Knee, mode: str) -> Action:
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


def knee_status_finding(sweep: SweepResult, knee: Knee | None) -> Finding | None:
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
            + (load_text(top) if top else "the highest level")
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
