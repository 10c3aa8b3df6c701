"""The HTML report: one self-contained file (inline CSS and SVG, no script, no network)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from servetune import __version__
from servetune.report.data import ReportData
from servetune.report.extras import Extras
from servetune.report.findings import DiagnoseView
from servetune.results.sweep_schema import LevelRow
from servetune.sweep import fmt

TEMPLATE = "report.html.j2"


@dataclass
class Figure:
    name: str
    title: str
    caption: str
    svg: Markup
    png: str | None


def template_env() -> Environment:
    env = Environment(
        loader=PackageLoader("servetune.report", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["ms"] = fmt.ms
    env.filters["num"] = fmt.num
    env.filters["pct"] = lambda v: "–" if v is None else f"{v:.0%}"
    return env


def run_verdict(row: LevelRow) -> str:
    """One sentence about a single run (a knee needs a sweep)."""
    if row.mode == "concurrency" and row.concurrency is not None:
        load = f"concurrency {row.concurrency}"
    elif row.offered_rate is None or math.isinf(row.offered_rate):
        load = "an unbounded rate (everything at once)"
    else:
        load = f"{fmt.num(row.offered_rate)} req/s offered"
    text = (
        f"One run at {load}: {fmt.num(row.request_throughput)} req/s "
        f"({fmt.num(row.output_throughput)} output tok/s) achieved, P99 TTFT "
        f"{fmt.ms(row.ttft_p99)}, TPOT {fmt.ms(row.tpot_p99)}, E2E {fmt.ms(row.e2el_p99)}"
    )
    s = row.server
    if s is not None and s.kv_cache_usage_mean is not None:
        text += f"; the server's KV cache averaged {s.kv_cache_usage_mean:.0%}"
        if s.waiting_mean is not None:
            text += f" with {fmt.num(s.waiting_mean, 2)} requests waiting on average"
    text += ". A knee needs several load levels: run servetune sweep."
    if row.status != "complete":
        share = f"{row.failure_share:.0%} " if row.failure_share else ""
        why = ", ".join(f"{n} {c}" for c, n in row.error_classes.items())
        lead = {
            "failed": f"This run FAILED: {share}of its requests failed ({why}).",
            "degraded": f"This run is DEGRADED: {share}of its requests failed ({why}); the "
            "figures describe only the requests that succeeded.",
            "cut_short": "This run was CUT SHORT (killed before it finished): the figures cover "
            "the requests it recorded.",
            "interrupted": "This run was interrupted: the figures cover the requests it finished.",
            "running": "This run is still going: figures so far.",
        }.get(row.status, f"Status: {row.status}.")
        text = lead + " " + text
    return text


def calibration_text(cal: dict[str, Any]) -> str:
    """A calibration (as an engine configuration records it) in one line: its id, the
    deployment it was measured on, the constants it applies."""
    dep = cal.get("deployment") or {}
    device = (dep.get("device") or {}).get("name", "?")
    consts = ", ".join(
        f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
        for k, v in (cal.get("constants") or {}).items()
    )
    pool = cal.get("kv_cache_tokens")
    return (
        f"{cal.get('id', '?')}: measured on {dep.get('engine', '?')} {dep.get('model', '?')} "
        f"on {device}; {consts or 'the catalog constants'}"
        + (f"; KV pool {pool:,} tokens" if pool else "")
    )


def _config_rows(obj: dict[str, Any]) -> list[tuple[str, str]]:
    out = []
    for k, v in obj.items():
        if v is None or v == {} or v == []:
            continue
        if k == "calibration" and isinstance(v, dict):
            out.append((k, calibration_text(v)))
            continue
        if isinstance(v, dict):
            v = ", ".join(f"{a}={b}" for a, b in v.items() if b is not None)
            if not v:
                continue
        out.append((k, str(v)))
    return out


def _title(data: ReportData) -> str:
    run = data.first_run if data.levels else None
    model = run.target.model if run else None
    engine = None
    if data.sweep and data.sweep.config.engine:
        engine = data.sweep.config.engine
    elif run and run.target.simulated:
        engine = run.target.simulated
    where = ""
    if engine and engine.get("gpu"):
        where = f" on simulated {engine.get('gpu')}"
    elif run:
        where = f" at {run.target.base_url}"
    kind = "Sweep" if data.kind == "sweep" else "Run"
    return f"{kind}: {model or 'model'}{where}"


def render_html(
    data: ReportData,
    figures: list[Figure],
    diagnosis: DiagnoseView | None,
    csv_name: str | None,
    extras: Extras | None = None,
) -> str:
    sweep = data.sweep
    run = data.first_run if data.levels else None
    rows = sweep.measured_rows() if sweep else [data.levels[0].row]
    knee = sweep.knee if sweep else None
    bracket = set(knee.bracket) if knee and knee.bracket else set()
    config: dict[str, Any] = (
        sweep.config.bench.model_dump(mode="json")
        if sweep
        else (run.config.model_dump(mode="json") if run else {})
    )
    sweep_settings: list[tuple[str, str]] = []
    engine: dict[str, Any] | None = None
    if sweep:
        c = sweep.config
        sweep_settings = _config_rows(c.model_dump(mode="json", exclude={"bench", "engine"}))
        engine = c.engine
    elif run and run.target.simulated:
        engine = run.target.simulated
    context = {
        "title": _title(data),
        "kind": data.kind,
        "mode": data.mode,
        "path": str(data.path),
        "sweep": sweep,
        "knee": knee,
        "slo_max": sweep.slo_max if sweep else None,
        "verdict": (knee.verdict if knee else None) or run_verdict(rows[0]),
        "rows": rows,
        "bracket": bracket,
        "figures": figures,
        "diagnosis": diagnosis if diagnosis is not None and not diagnosis.error else None,
        "csv_name": csv_name,
        "config": _config_rows(config),
        "sweep_settings": sweep_settings,
        "engine": _config_rows(engine) if engine else [],
        "target": _config_rows(run.target.model_dump(mode="json", exclude={"simulated"}))
        if run
        else [],
        "server_info": run.server if run else None,
        "environment": run.environment if run else None,
        "command": " ".join(sweep.command)
        if sweep and sweep.command
        else (" ".join(run.environment.command) if run else ""),
        "warnings": (sweep.warnings if sweep else (run.warnings if run else [])),
        "notes": data.notes,
        "metric_definitions": run.metric_definitions if run else {},
        "generated": datetime.now(UTC).isoformat(timespec="seconds"),
        "version": __version__,
        "metric_names": fmt.METRIC_NAMES,
        "fmt_load": fmt.load,
        "isinf": math.isinf,
        "cost": extras.cost if extras else None,
        "quality": extras.quality if extras else None,
    }
    return template_env().get_template(TEMPLATE).render(**context)
