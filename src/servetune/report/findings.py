"""The report's slot for diagnose findings.

``servetune.diagnose`` names bottlenecks with evidence and knob changes. When it provides
``diagnose_path(RUN_OR_SWEEP_DIR) -> Diagnosis``, the report shows its headline, its findings
(verdicts and warnings first, with their actions) and, for a sweep, one line per level. When
it is absent the slot renders nothing — no placeholder text.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


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


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def _action_text(action: Any) -> str:
    if isinstance(action, str):
        return action
    text = str(_get(action, "title") or action)
    expected = _get(action, "expected")
    risk = _get(action, "risk")
    if expected:
        text += f" — {expected}"
    if risk:
        text += f" (risk: {risk})"
    return text


def _finding(obj: Any) -> Finding:
    scope = _get(obj, "level") or _get(obj, "scope")
    return Finding(
        title=str(_get(obj, "title") or _get(obj, "verdict") or obj),
        severity=str(_get(obj, "kind") or _get(obj, "severity") or "info"),
        scope=str(scope) if scope and scope != "run" else None,
        evidence=[str(e) for e in (_get(obj, "evidence") or [])],
        actions=[_action_text(a) for a in (_get(obj, "actions") or [])],
    )


def view_of(diagnosis: Any) -> DiagnoseView:
    """The report's view of a ``Diagnosis`` (read by attribute, so a changed model degrades
    to fewer details rather than an error)."""
    view = DiagnoseView(headline=str(_get(diagnosis, "headline") or ""))
    for f in _get(diagnosis, "findings") or []:
        if _get(f, "kind") == "cannot_tell":
            missing = ", ".join(str(m) for m in (_get(f, "missing") or []))
            view.cannot_tell.append(f"{_get(f, 'title')}" + (f" ({missing})" if missing else ""))
        else:
            view.findings.append(_finding(f))
    for lv in _get(diagnosis, "levels") or []:
        view.levels.append((str(_get(lv, "label")), str(_get(lv, "headline") or "")))
    return view


def diagnose_view(path: Path) -> DiagnoseView | None:
    """Diagnose a RUN_DIR or SWEEP_DIR for the report, or None when diagnose is absent."""
    try:
        module = importlib.import_module("servetune.diagnose")
    except ImportError:
        return None
    entry = getattr(module, "diagnose_path", None)
    if entry is None or not callable(entry):
        return None
    try:
        return view_of(entry(path))
    except Exception as exc:  # another command's code: its failure must not sink the report
        return DiagnoseView(error=f"diagnose failed on {path}: {type(exc).__name__}: {exc}")
