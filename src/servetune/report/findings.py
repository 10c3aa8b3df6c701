"""The report's slot for diagnose findings.

``servetune.diagnose`` (built separately) names bottlenecks with evidence and knob changes.
When it is installed and offers a ``diagnose_dir(path)`` entry point, its findings are shown in
the report; otherwise the slot stays empty (no placeholder text).
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
    scope: str | None = None
    evidence: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)


def _text_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    out = []
    for item in value:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict):
            out.append(str(item.get("text") or item.get("summary") or item))
        else:
            out.append(str(getattr(item, "text", None) or getattr(item, "summary", None) or item))
    return out


def _as_finding(obj: Any) -> Finding:
    get = obj.get if isinstance(obj, dict) else lambda k, d=None: getattr(obj, k, d)
    title = get("verdict") or get("title") or get("summary") or str(obj)
    return Finding(
        title=str(title),
        severity=str(get("severity") or "info"),
        scope=get("scope") or get("level"),
        evidence=_text_list(get("evidence")),
        actions=_text_list(get("actions")),
    )


def diagnose_findings(path: Path) -> list[Finding]:
    """Findings for a RUN_DIR or SWEEP_DIR, or [] when diagnose is not available."""
    try:
        module = importlib.import_module("servetune.diagnose")
    except ImportError:
        return []
    entry = getattr(module, "diagnose_dir", None)
    if entry is None or not callable(entry):
        return []
    result = entry(path)
    items = getattr(result, "findings", result)
    return [_as_finding(x) for x in items or []]
