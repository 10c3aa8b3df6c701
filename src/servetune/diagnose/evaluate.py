"""The rule engine: figures + the rules table → ranked findings (a saturated server's limiter
from :mod:`~servetune.diagnose.limiter`, the latency tail from
:mod:`~servetune.diagnose.latency_tail`); one run's Diagnosis is :mod:`~servetune.diagnose.run`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from servetune.diagnose.actions.build import build_action
from servetune.diagnose.conditions import Condition, render, template_fields
from servetune.diagnose.figures.server import MIN_SAMPLES
from servetune.diagnose.figures.table import Figures
from servetune.diagnose.latency_tail import tail_finding
from servetune.diagnose.limiter import what_limits
from servetune.diagnose.model import KIND_ORDER, Confidence, Finding, FindingKind
from servetune.diagnose.rules import (
    CAUSES,
    RULES,
    Rule,
)


def _extra(fig: Figures) -> dict[str, Any]:
    """Knob values as words, for templates that name them."""
    cfg = fig.config
    return {
        "quantization": cfg.get("quantization") or "bf16",
        "kv_cache_dtype": cfg.get("kv_cache_dtype") or "auto",
    }


def needs(rule: Rule) -> list[str]:
    """Every figure a rule reads (its conditions and its evidence)."""
    names: list[str] = []
    for c in (*rule.when, *rule.unless):
        names += list(c.figures())
    names += list(rule.only_if) + list(rule.require_any)
    for t in (rule.verdict, *rule.evidence):
        names += template_fields(t)
    return list(dict.fromkeys(n for n in names if n in _known_figures()))


def _known_figures() -> set[str]:
    from servetune.diagnose.figures.table import FIGURES

    return set(FIGURES)


def _cond_line(c: Condition, state: bool | None, fig: Figures, extra: dict[str, Any]) -> str:
    mark = {True: "✓", False: "✗", None: "?"}[state]
    text = render(c.text, fig, extra) if c.text else None
    if text is None:
        text = c.describe()
    if state is None:
        why = "; ".join(
            dict.fromkeys(fig.missing.get(f, f"{f} unknown") for f in c.figures() if not fig.has(f))
        )
        return f"{mark} {c.describe()}: {why}"
    return f"{mark} {text}"


def _validity_low(fig: Figures) -> bool:
    if fig.get("client_behind"):
        return True
    excess = fig.get("prefix_cache_excess")
    if excess is not None and excess > 0:  # the run measured the cache
        return True
    samples = fig.get("server_samples")
    return samples is not None and 0 < samples < MIN_SAMPLES


def evaluate_rule(rule: Rule, fig: Figures) -> Finding | None:
    """The rule's finding on these figures: fired, cannot tell, or None (does not apply)."""
    if any(not fig.has(name) for name in rule.only_if):
        return None
    if any(c.evaluate(fig) is True for c in rule.unless):
        return None
    states = [(c, c.evaluate(fig)) for c in rule.when]
    if any(s is False for _, s in states):
        return None
    extra = _extra(fig)
    unknown_required = [c for c, s in states if s is None and c.if_missing == "cannot_tell"]
    unknown_noted = [c for c, s in states if s is None and c.if_missing == "note"]
    need_any_unmet = bool(rule.require_any) and not any(fig.has(n) for n in rule.require_any)
    missing: list[str] = []
    for c in unknown_required + unknown_noted:
        for f in c.figures():
            if not fig.has(f) and f in fig.missing:
                missing.append(fig.missing[f])
    if need_any_unmet:
        missing += [fig.missing[n] for n in rule.require_any if n in fig.missing]
    missing = list(dict.fromkeys(missing))
    evidence = [e for e in (render(t, fig, extra) for t in rule.evidence) if e]
    used = {n: fig.values[n] for n in needs(rule) if n in fig.values}
    conditions = [_cond_line(c, s, fig, extra) for c, s in states]
    kind: FindingKind
    confidence: Confidence
    if unknown_required or need_any_unmet:
        # What held so far — only when it was seen to hold: with a required condition
        # unknown, the phrase would assert what the run could not show.
        so_far = (
            render(rule.cannot_tell, fig, extra)
            if rule.cannot_tell and not unknown_required
            else None
        )
        title = f"{so_far or rule.id.replace('_', ' ')}: cannot tell"
        title = f"{title} — {missing[0]}" if missing else title
        kind, confidence, action_ids = "cannot_tell", "low", rule.fallback_actions
    else:
        title = render(rule.verdict, fig, extra) or rule.verdict.split("{")[0].rstrip(" :(")
        kind, action_ids = rule.kind, rule.actions
        confidence = "medium" if unknown_noted else "high"
        if _validity_low(fig) and rule.id not in ("client_behind", "prefix_cache_inflated"):
            confidence = "low"
    return Finding(
        rule=rule.id,
        kind=kind,
        title=title,
        seed=rule.seed,
        confidence=confidence,
        priority=rule.priority,
        evidence=evidence,
        conditions=conditions,
        missing=missing,
        needs=needs(rule),
        actions=[a for a in (build_action(a, fig) for a in action_ids) if a is not None],
        figures=used,
    )


def rank(findings: Sequence[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (KIND_ORDER.get(f.kind, 9), -f.priority))


def evaluate(fig: Figures, rules: Sequence[Rule] = RULES) -> list[Finding]:
    """Every rule on one run's figures, ranked; a ``healthy`` finding when no verdict fires."""
    found: dict[str, Finding] = {}
    for rule in rules:
        f = evaluate_rule(rule, fig)
        if f is not None:
            found[rule.id] = f
    over = found.get("overloaded")
    if over is not None and over.kind == "bottleneck":
        over.cause = what_limits(found, fig)
        over.title += f"; limited by {over.cause}"
        if any(found.get(c) is not None and found[c].kind == "bottleneck" for c in CAUSES):
            # The cause's finding carries the cost-ordered fixes; here only what is left.
            over.actions = [a for a in over.actions if a.cost_step >= 3]
    tail = tail_finding(fig, found)
    if tail is not None:
        found[tail.rule] = tail
    findings = rank(list(found.values()))
    if not any(f.kind in ("bottleneck", "warning") for f in findings):
        findings.insert(0, healthy_finding(fig, findings))
    return findings


def healthy_finding(fig: Figures, others: Sequence[Finding]) -> Finding:
    parts = []
    for name, text in (
        ("kv_mean", "KV-cache use mean {kv_mean:pct}"),
        ("preemptions", "{preemptions:int} preemptions"),
        ("served_sent_ratio", "kept up with the offered load"),
        ("ttft_p99_ms", "P99 TTFT {ttft_p99_ms:ms}"),
        ("tpot_p99_ms", "P99 TPOT {tpot_p99_ms:ms}"),
    ):
        if fig.has(name):
            line = render(text, fig)
            if line:
                parts.append(line)
    unknown = [f for f in others if f.kind == "cannot_tell"]
    tail = next((f for f in others if f.rule == "latency_tail"), None)
    if tail is not None:
        parts = [p for p in parts if not p.startswith("P99 TPOT")] + [tail.title]
    title = "Healthy: no bottleneck found"
    if unknown:
        title += f" (but {len(unknown)} rule(s) could not be evaluated)"
    return Finding(
        rule="healthy",
        kind="healthy",
        title=title + (" — " + ", ".join(parts) if parts else ""),
        seed="find the bottleneck before you tune: none of the seed's rules fired",
        evidence=parts,
        confidence="high" if not unknown else "medium",
    )
