"""A level past the knee, diagnosed as a run, made to agree with the curve: its own verdicts
that say "not enough load" or "healthy" give way to "past the knee", and a rate limit it
guessed from itself alone becomes the knee's."""

from __future__ import annotations

from servetune.diagnose.conditions import fmt_ms, fmt_num
from servetune.diagnose.evaluate import rank
from servetune.diagnose.model import Finding
from servetune.diagnose.sweep.knee import knee_action, load_text
from servetune.results.sweep_schema import Knee, LevelRow
from servetune.sweep.fmt import METRIC_NAMES

CONTRADICT_PAST_KNEE = ("under_loaded", "healthy", "knee_not_reached")
"""A level's own verdicts that the curve contradicts once the level is past the knee."""


def agree_with_the_curve(
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
        title=f"Past the knee of the curve ({load_text(row)}){rising} — more load here buys "
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
    at_knee = knee_action(knee, mode)
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
