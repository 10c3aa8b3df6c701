"""A Diagnosis as text for a person: the headline, the ranked verdicts with their evidence and
the actions in cost order, then what could not be told — short by default, all with
``verbose``."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from servetune.diagnose.model import COST_STEPS, Action, Diagnosis, Finding
from servetune.profiles import NEUTRAL, find


def _name(engine: str) -> str:
    """The engine's display name (its profile's)."""
    found = find(engine)
    return found.display_name if found else engine


def _action_lines(a: Action, letter: str, verbose: bool) -> list[str]:
    step = f"[cost order {COST_STEPS[a.cost_step]}] " if a.cost_step else ""
    out = [f"     {letter}. {step}{a.title}"]
    if a.flags:
        if verbose:
            for engine, text in a.flags.items():
                out.append(f"          {_name(engine)}: {text}")
        else:
            others = " · ".join(
                f"{_name(e)} {t.split('  [')[0]}"
                for e, t in a.flags.items()
                if e != NEUTRAL and not t.startswith("no equivalent")
            )
            if others:
                out.append(f"          elsewhere: {others}")
    out.append(f"          expect: {a.expected}")
    out.append(f"          risk: {a.risk}")
    if verbose and a.verify:
        out.append(f"          verify: {a.verify}")
    return out


def _finding_lines(i: int, f: Finding, verbose: bool) -> list[str]:
    where = f" ({f.level})" if f.level and f.scope != "level" else ""
    out = [f"{i}. [{f.kind} · confidence {f.confidence}]{where} {f.title}"]
    evidence = f.evidence if verbose else f.evidence[:4]
    out += [f"   - {e}" for e in evidence]
    if verbose and f.conditions:
        out.append("   rule:")
        out += [f"     {c}" for c in f.conditions]
    if f.missing:
        out += [f"   ? cannot tell: {m}" for m in f.missing]
    actions = f.actions if verbose else f.actions[:3]
    if actions:
        out.append("   do (one knob at a time, in this order):")
        for j, a in enumerate(actions):
            out += _action_lines(a, "abcdefghij"[j], verbose)
        if len(f.actions) > len(actions):
            out.append(f"     … {len(f.actions) - len(actions)} more (--verbose)")
    return out


def _cannot_tell_block(findings: list[Finding]) -> list[str]:
    """Cannot-tells with something to say (known evidence, an experiment) one by one; the
    rest grouped by the missing metric."""
    out: list[str] = []
    by_reason: dict[str, list[str]] = defaultdict(list)
    for f in findings:
        reason = f.missing[0] if f.missing else "a metric is missing"
        if f.actions:
            out.append(f"  ? {f.title}")
            out.append(f"      → {f.actions[0].title}")
        else:
            by_reason[reason].append(f.rule.replace("_", " "))
    out += [f"  cannot tell ({', '.join(rules)}): {reason}" for reason, rules in by_reason.items()]
    return out


def render_findings(findings: list[Finding], verbose: bool) -> list[str]:
    shown = [f for f in findings if f.kind in ("bottleneck", "warning", "healthy")]
    advisories = [f for f in findings if f.kind == "advisory"]
    unknown = [f for f in findings if f.kind == "cannot_tell"]
    out: list[str] = []
    for i, f in enumerate(shown, 1):
        out += _finding_lines(i, f, verbose)
        out.append("")
    for f in advisories:
        out.append(f"  note: {f.title}")
        for a in f.actions[:1]:
            out.append(f"        → {a.title}")
    if unknown:
        if verbose:
            for i, f in enumerate(unknown, len(shown) + 1):
                out += _finding_lines(i, f, verbose)
        else:
            out += _cannot_tell_block(unknown)
    return out


def render(diag: Diagnosis, verbose: bool = False) -> str:
    what = {"run": "run", "sweep": "sweep", "config": "config (before launch)"}[diag.kind]
    lines = [f"servetune diagnose — {what}" + (f": {diag.path}" if diag.path else "")]
    lines.append(f"▶ {diag.headline}")
    lines.append("")
    if diag.kind == "sweep":
        lines.append("The curve:")
    lines += render_findings(diag.findings, verbose)
    if diag.levels:
        lines.append("")
        lines.append("Per level:")
        for lv in diag.levels:
            mark = " [past the knee]" if lv.past_knee else ""
            lines.append(f"  {lv.label}{mark}: {lv.headline}")
            if verbose:
                for f in lv.findings:
                    if f.kind in ("bottleneck", "warning"):
                        lines.append(f"      · {f.title}")
    if verbose and diag.notes:
        lines.append("")
        lines += [f"  note: {n}" for n in diag.notes]
    elif diag.notes:
        lines += [f"  note: {n}" for n in diag.notes if not n.startswith("vLLM would print")]
    if any(f.actions for f in diag.findings):
        lines.append("")
        lines.append("Before changing anything (the seed's procedure):")
        lines += [f"  - {p}" for p in diag.procedure]
    return "\n".join(line.rstrip() for line in lines).rstrip() + "\n"


def rules_table() -> list[dict[str, Any]]:
    """The rules as data, for a person or a machine (``servetune diagnose --rules``)."""
    from servetune.diagnose.actions.table import ACTIONS
    from servetune.diagnose.doctor.rules import DOCTOR_RULES
    from servetune.diagnose.evaluate import needs
    from servetune.diagnose.rules import RULES

    out: list[dict[str, Any]] = []
    for scope, rules in (("run", RULES), ("config", DOCTOR_RULES)):
        for r in rules:
            out.append(
                {
                    "id": r.id,
                    "scope": scope,
                    "kind": r.kind,
                    "seed": r.seed,
                    "when": [
                        {"condition": c.describe(), "if_missing": c.if_missing} for c in r.when
                    ],
                    "only_if": list(r.only_if),
                    "unless": [c.describe() for c in r.unless],
                    "require_any": list(r.require_any),
                    "needs": needs(r),
                    "verdict": r.verdict,
                    "actions": [
                        {"id": a, "knob": ACTIONS[a].knob, "cost_step": ACTIONS[a].cost_step}
                        for a in r.actions
                    ],
                }
            )
    return out


def render_rules() -> str:
    lines: list[str] = []
    for r in rules_table():
        lines.append(f"{r['id']} ({r['scope']}, {r['kind']}) — the seed: {r['seed']}")
        for c in r["when"]:
            note = "" if c["if_missing"] == "cannot_tell" else "  (noted when unknown)"
            lines.append(f"    when {c['condition']}{note}")
        for c in r["unless"]:
            lines.append(f"    unless {c}")
        if r["require_any"]:
            lines.append(f"    needs one of {', '.join(r['require_any'])}")
        steps = ", ".join(
            f"{a['id']}" + (f" [cost {a['cost_step']}]" if a["cost_step"] else "")
            for a in r["actions"]
        )
        if steps:
            lines.append(f"    then {steps}")
        lines.append(f"    reads {', '.join(r['needs'])}")
    return "\n".join(lines) + "\n"
