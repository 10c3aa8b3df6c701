"""A Grafana (≥ 10) dashboard of the figures `servetune watch` shows, for one engine's names
(:mod:`servetune.watch.promql`): requests/s, tokens/s, TTFT/TPOT/ITL/E2E percentiles from the
histograms, KV-cache use (with the rules' 50% and 90% lines), running/waiting, preemptions,
prefix-cache hit rate. Panels whose metrics the engine does not export are left out and named
in the dashboard's description. Variables: ``datasource`` (a Prometheus) and ``instance``.
"""

from __future__ import annotations

from typing import Any

from servetune.diagnose.rules import LONG_SHARE
from servetune.profiles import profile
from servetune.results import server_series as ss
from servetune.watch.promql import Promql

SCHEMA_VERSION = 38  # Grafana 10.0
DS = {"type": "prometheus", "uid": "${datasource}"}


def _panel(
    pid: int, title: str, unit: str, targets: list[tuple[str, str]], x: int, y: int, **extra: Any
) -> dict[str, Any]:
    defaults: dict[str, Any] = {"unit": unit, "custom": {"lineWidth": 1, "fillOpacity": 5}}
    defaults.update(extra.pop("defaults", {}))
    return {
        "id": pid,
        "type": "timeseries",
        "title": title,
        "datasource": DS,
        "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "none"},
        },
        "targets": [
            {"refId": chr(ord("A") + i), "datasource": DS, "expr": e, "legendFormat": legend}
            for i, (e, legend) in enumerate(targets)
        ],
        **extra,
    }


def dashboard(q: Promql, title: str | None = None) -> dict[str, Any]:
    """The dashboard for ``q``'s engine map (its window is ignored: Grafana's
    ``$__rate_interval`` is used, and the ``instance`` variable filters every query)."""
    g = Promql(
        q.emap,
        known=q.known,
        exposed=q.exposed,
        absent=q.absent,
        matcher='instance=~"$instance"',
        window_text="$__rate_interval",
    )
    panels: list[dict[str, Any]] = []
    left_out: list[str] = []

    def add(title: str, unit: str, targets: list[tuple[str | None, str]], **extra: Any) -> None:
        have = [(e, legend) for e, legend in targets if e is not None]
        if not have:
            left_out.append(title)
            return
        i = len(panels)
        x, y = (i % 2) * 12, (i // 2) * 8
        panels.append(_panel(i + 1, title, unit, have, x, y, **extra))

    add("Requests finished", "reqps", [(g.figure("request_throughput"), "{{instance}}")])
    add(
        "Tokens",
        "short",
        [
            (g.counter_rate(ss.PROMPT_TOKENS_TOTAL), "{{instance}} prompt tok/s"),
            (g.counter_rate(ss.GENERATION_TOKENS_TOTAL), "{{instance}} generated tok/s"),
        ],
    )
    for name, concept in (
        ("TTFT", ss.TTFT_SECONDS),
        ("TPOT", ss.TPOT_SECONDS),
        ("ITL", ss.ITL_SECONDS),
        ("E2E latency", ss.E2E_SECONDS),
        ("Queue time", ss.QUEUE_SECONDS),
    ):
        add(
            f"{name} (percentiles of the server's histogram)",
            "ms",
            [
                (g.quantile_ms(concept, qq), f"{{{{instance}}}} p{int(qq * 100)}")
                for qq in (0.5, 0.9, 0.99)
            ],
        )
    add(
        "KV-cache use",
        "percentunit",
        [(g.gauge(ss.KV_CACHE_USAGE), "{{instance}}")],
        defaults={
            "min": 0,
            "max": 1,
            "custom": {"lineWidth": 1, "fillOpacity": 5, "thresholdsStyle": {"mode": "line"}},
            "thresholds": {
                "mode": "absolute",
                "steps": [
                    {"color": "blue", "value": None},
                    {"color": "green", "value": 0.5},
                    {"color": "red", "value": 0.9},
                ],
            },
        },
        description=f"the seed's lines: long below 50% (≥ {LONG_SHARE:.0%} of the time) = not "
        "enough load; above 90% with preemptions = the KV pool is full",
    )
    add(
        "Requests running / waiting",
        "short",
        [
            (g.gauge(ss.RUNNING), "{{instance}} running"),
            (g.gauge(ss.WAITING), "{{instance}} waiting"),
        ],
    )
    add("Preemptions", "short", [(g.figure("preemptions_per_s"), "{{instance}} per s")])
    add(
        "Prefix-cache hit rate",
        "percentunit",
        [(g.figure("prefix_cache_hit_rate"), "{{instance}}")],
    )
    names = set()
    for p in panels:
        for t in p["targets"]:
            names |= q.names(t["expr"])
    probe = sorted(n for n in names if not n.endswith("_bucket"))
    variable_metric = probe[0] if probe else "up"
    desc = f"servetune: {q.emap.label} metric names."
    if left_out:
        desc += " Not exported by this engine, so left out: " + ", ".join(left_out) + "."
    return {
        "title": title or f"servetune — {q.emap.label}",
        "uid": f"servetune-{profile(q.emap.engine).slug}",
        "description": desc,
        "tags": ["servetune", q.emap.engine],
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "editable": True,
        "graphTooltip": 1,
        "time": {"from": "now-1h", "to": "now"},
        "refresh": "10s",
        "timezone": "",
        "annotations": {"list": []},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Prometheus",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                },
                {
                    "name": "instance",
                    "type": "query",
                    "datasource": DS,
                    "query": {"query": f"label_values({variable_metric}, instance)", "refId": "I"},
                    "definition": f"label_values({variable_metric}, instance)",
                    "refresh": 2,
                    "includeAll": True,
                    "multi": True,
                    "current": {},
                    "hide": 0,
                },
            ]
        },
        "panels": panels,
    }
