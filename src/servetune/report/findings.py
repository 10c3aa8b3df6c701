"""The report's view of ``diagnose``: its headline, its findings (verdicts and warnings first,
with their actions) and, for a sweep, one line per level.

A diagnosis that cannot be made from the directory (a :class:`~servetune.errors.ServetuneError`:
files diagnose needs and the report does not) becomes a note in the report instead of sinking
it; anything else is a bug and surfaces as one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from servetune.diagnose import Diagnosis, diagnose_path
from servetune.diagnose.model import Action
from servetune.diagnose.model import Finding as DxFinding
from servetune.errors import ServetuneError


@dataclass
class Finding:
    title: str
    severity: str = "info"
    """bottleneck, warning, advisory, healthy (CSS classes of the slot)."""
    scope: str | None = None
    evidence: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)


@dataclass
class DiagnoseView:
    headline: str = ""
    findings: list[Finding] = field(default_factory=list)
    levels: list[tuple[str, str]] = field(default_factory=list)
    """(level label, that level's headline) for a sweep."""
    cannot_tell: list[str] = field(default_factory=list)
    """Rules that could not be evaluated, and what they missed."""
    error: str | None = None


def _action_text(action: Action) -> str:
    text = action.title
    if action.expected:
        text += f" — {action.expected}"
    if action.risk:
        text += f" (risk: {action.risk})"
    return text


def _finding(f: DxFinding) -> Finding:
    return Finding(
        title=f.title,
        severity=f.kind,
        scope=f.level or (f.scope if f.scope != "run" else None),
        evidence=list(f.evidence),
        actions=[_action_text(a) for a in f.actions],
    )


def view_of(diagnosis: Diagnosis) -> DiagnoseView:
    """The report's view of a :class:`~servetune.diagnose.Diagnosis`."""
    view = DiagnoseView(headline=diagnosis.headline)
    for f in diagnosis.findings:
        if f.kind == "cannot_tell":
            missing = ", ".join(f.missing)
            view.cannot_tell.append(f.title + (f" ({missing})" if missing else ""))
        else:
            view.findings.append(_finding(f))
    view.levels = [(lv.label, lv.headline) for lv in diagnosis.levels]
    return view


def diagnose_view(path: Path) -> DiagnoseView:
    """Diagnose a RUN_DIR or SWEEP_DIR for the report."""
    try:
        return view_of(diagnose_path(path))
    except ServetuneError as exc:
        return DiagnoseView(error=f"diagnose could not read {path}: {exc.message}")
