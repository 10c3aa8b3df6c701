"""Prometheus alerting rules for the seed's troubleshooting table, generated from diagnose's
rule table (:data:`servetune.diagnose.rules.RULES`) — the same conditions and thresholds that
judge a run and that `servetune watch` evaluates live, written as PromQL over one engine's
names (:mod:`servetune.watch.promql`).

Per rule: every ``when`` condition becomes ``(figure) op threshold`` and they are joined with
``and``; an ``AnyOf`` becomes ``or`` (an ``AllOf`` inside it ``and``); ``unless`` conditions
become ``unless``. A condition on a knob is decided now from ``--server-cmd`` (true: dropped;
false: the rule can never fire and is left out). A figure PromQL cannot compute from the
engine's metrics is handled as diagnose handles a missing figure: a condition marked "note"
is dropped, one the rule needs leaves the rule out, and the file's header says which rules
were left out and why. Advisories (facts of the configuration, not of the traffic) and the
rules that judge a load test's client are not alerts; ``server_gone`` is (``up == 0``: an
engine that died, e.g. of an out-of-memory error). Every alert holds for the hold time of a
watch finding (``for:`` and ``keep_firing_for:``, :mod:`servetune.watch.hold`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from servetune.diagnose.actions.table import ACTIONS
from servetune.diagnose.conditions import AllOf, Cond, Condition
from servetune.diagnose.figures.config import KNOB_FIGURES
from servetune.diagnose.rules import RULES, Rule
from servetune.diagnose.window import CLIENT_RULES
from servetune.watch.hold import HOLD_S
from servetune.watch.promql import BY, Promql

SEVERITY = {"bottleneck": "critical", "warning": "warning"}
ALERT_RULE_IDS = tuple(
    r.id
    for r in RULES
    if (r.id not in CLIENT_RULES or r.id == "server_gone") and r.kind != "advisory"
)
_KNOB_FIGURES = frozenset(KNOB_FIGURES)


KNOB_BASED = {
    "running_at_cap_share": "needs --max-num-seqs from the engine's configuration (--server-cmd)",
    "compute_use_est": "needs the GPU and the model (--gpu, --model)",
}


class _Skip(Exception):
    pass


@dataclass
class AlertSet:
    groups: list[dict[str, Any]]
    skipped: dict[str, str] = field(default_factory=dict)
    """Rule id → why it is not an alert for this engine and configuration."""
    notes: dict[str, list[str]] = field(default_factory=dict)
    """Rule id → conditions that could not be checked (dropped, as diagnose notes them)."""

    def yaml(self, header: list[str]) -> str:
        lines = [f"# {h}" for h in header]
        for rid, why in self.skipped.items():
            lines.append(f"# not an alert here: {rid} — {why}")
        body = str(
            yaml.safe_dump({"groups": self.groups}, sort_keys=False, allow_unicode=True, width=100)
        )
        return "\n".join(lines) + ("\n" if lines else "") + body


def _camel(rule_id: str) -> str:
    return "Servetune" + "".join(p.capitalize() for p in rule_id.split("_"))


def _knob_value(q: Promql, figure: str) -> float | None:
    cfg = q.known
    if figure == "enable_chunked_prefill":
        v = cfg.get("enable_chunked_prefill")
        return None if v is None else float(bool(v))
    if figure == "quantized":
        return (
            None if "quantization" not in cfg.values else float(cfg.get("quantization") is not None)
        )
    if figure == "kv_fp8":
        if "kv_cache_dtype" not in cfg.values:
            return None
        d = cfg.get("kv_cache_dtype")
        return float(isinstance(d, str) and d.startswith("fp8"))
    return q.knob(figure)


def _figure(q: Promql, name: str) -> str | None:
    if name == "server_gone":
        return f"(1 - max by ({BY}) (up))"
    found = q.figure(name)
    return None if found is None else str(found)


def _cond(q: Promql, c: Cond, notes: list[str]) -> str | None:
    """PromQL for one condition; None = dropped (always true here); _Skip = cannot fire."""
    if c.figure in _KNOB_FIGURES:
        v = _knob_value(q, c.figure)
        if v is None:
            if c.if_missing == "note":
                notes.append(f"{c.describe()} (the engine's configuration was not given)")
                return None
            raise _Skip(f"needs {c.figure} from the engine's configuration (--server-cmd)")
        from servetune.diagnose.conditions import OPS

        if OPS[c.op](v, c.value):
            return None
        raise _Skip(f"{c.describe()} is false for this configuration: it cannot fire")
    expr = _figure(q, c.figure)
    if expr is None:
        if c.if_missing == "note":
            notes.append(f"{c.describe()} (not in this engine's metrics)")
            return None
        if c.figure in KNOB_BASED:
            raise _Skip(f"{c.figure} {KNOB_BASED[c.figure]}")
        raise _Skip(f"{c.figure} cannot be computed from this engine's metrics")
    return f"({expr} {c.op} {c.value:g})"


def _member(q: Promql, m: Cond) -> str | None:
    """One member of an any-of / all-of: its PromQL; None = a knob condition known true;
    _Skip = it cannot be computed here (or is known false)."""
    e = _cond(q, Cond(m.figure, m.op, m.value, m.text, "note"), [])
    if e is None and not (m.figure in _KNOB_FIGURES and _knob_value(q, m.figure) is not None):
        raise _Skip(m.describe())
    return e


def _all_of(q: Promql, c: AllOf) -> str | None:
    """An all-of inside an any-of: every member, joined by ``and`` (None: all known true)."""
    parts = [e for e in (_member(q, m) for m in c.conds) if e is not None]
    return "(" + " and ".join(parts) + ")" if parts else None


def _condition(q: Promql, c: Condition, notes: list[str]) -> str | None:
    if isinstance(c, Cond):
        return _cond(q, c, notes)
    parts: list[str] = []
    for m in c.conds:
        try:
            e = _all_of(q, m) if isinstance(m, AllOf) else _member(q, m)
        except _Skip:
            continue
        if e is None:
            return None  # a member known true: the whole AnyOf is true
        parts.append(e)
    if not parts:
        if c.if_missing == "note":
            notes.append(f"{c.describe()} (not in this engine's metrics)")
            return None
        raise _Skip(f"none of {c.describe()} can be computed from this engine's metrics")
    return "(" + " or ".join(parts) + ")"


def _flag(engine: str, knob_name: str | None) -> str:
    """The engine's flag for a knob (the knob registry), or the knob's name."""
    if not knob_name:
        return ""
    from servetune import knobs
    from servetune.errors import ServetuneError

    try:
        found = knobs.flag(engine, knob_name)
    except ServetuneError:
        found = None
    return found or knob_name


def _actions(rule: Rule, engine: str) -> str:
    out = []
    for aid in rule.actions:
        spec = ACTIONS.get(aid)
        if spec is None:
            continue
        title = spec.title.replace("{flag}", _flag(engine, spec.knob))
        title = re.sub(r"\s*\{old\}\s*→\s*\{new\}", "", title)  # values a run would give
        title = re.sub(r"\s*\([^()]*\{[a-z_]+\}[^()]*\)", "", title)
        title = re.sub(r"\{[a-z_]+\}", "…", title)
        out.append(f"{spec.cost_step}. {title}" if spec.cost_step else title)
    return "; ".join(out)


def alert_for(q: Promql, rule: Rule) -> tuple[dict[str, Any] | None, str | None, list[str]]:
    """(the alerting rule, None) or (None, why it cannot be one); and the notes."""
    notes: list[str] = []
    try:
        for name in rule.only_if:
            if name in _KNOB_FIGURES:
                if _knob_value(q, name) is None:
                    raise _Skip(f"applies only when {name} is known (--server-cmd)")
            elif _figure(q, name) is None:
                raise _Skip(f"needs {name}, which this engine's metrics do not give")
        if rule.require_any and not any(
            (_knob_value(q, n) is not None) if n in _KNOB_FIGURES else _figure(q, n) is not None
            for n in rule.require_any
        ):
            raise _Skip(
                "needs one of " + ", ".join(rule.require_any) + " (GPU utilisation is not in the "
                "engine's metrics; give --gpu and --model for the compute-load estimate)"
            )
        when = [e for e in (_condition(q, c, notes) for c in rule.when) if e is not None]
        if not when:
            raise _Skip("no condition left that the engine's metrics can show")
        expr = " and ".join(when)
        for c in rule.unless:
            try:
                u = _condition(q, c, [])
            except _Skip:
                notes.append(f"unless {c.describe()}: not checked (not in this engine's metrics)")
                continue
            if u is not None:
                expr = f"({expr}) unless {u}"
    except _Skip as exc:
        return None, str(exc), notes
    conditions = "; ".join(c.describe() for c in rule.when)
    ann = {
        "summary": rule.seed,
        "description": f"{rule.id} over the last {q.w}: {conditions}.",
        "actions": _actions(rule, q.emap.engine) or "see servetune diagnose",
    }
    if notes:
        ann["not_checked"] = "; ".join(notes)
    alert = {
        "alert": _camel(rule.id),
        "expr": expr,
        "labels": {
            "severity": SEVERITY.get(rule.kind, "info"),
            "servetune_rule": rule.id,
            "engine": q.emap.engine,
        },
        "annotations": ann,
    }
    return alert, None, notes


def alert_rules(q: Promql, for_s: float = HOLD_S, group: str | None = None) -> AlertSet:
    """The alerting rules; each fires once its condition held for ``for_s`` and keeps firing
    until it has been absent as long (``for:`` / ``keep_firing_for:``, Prometheus ≥ 2.42):
    the hold time of a `servetune watch` finding (:mod:`servetune.watch.hold`)."""
    from servetune.watch.promql import duration

    rules = []
    skipped: dict[str, str] = {}
    notes: dict[str, list[str]] = {}
    by_id = {r.id: r for r in RULES}
    for rid in ALERT_RULE_IDS:
        alert, why, n = alert_for(q, by_id[rid])
        if alert is None:
            skipped[rid] = why or "cannot be expressed"
            continue
        if for_s > 0:
            alert = {**alert, "for": duration(for_s), "keep_firing_for": duration(for_s)}
            order = ("alert", "expr", "for", "keep_firing_for", "labels", "annotations")
            alert = {k: alert[k] for k in order}
        rules.append(alert)
        if n:
            notes[rid] = n
    name = group or f"servetune-{q.emap.engine}"
    return AlertSet(groups=[{"name": name, "rules": rules}], skipped=skipped, notes=notes)
