"""Latency SLOs of ``tune`` and ``plan``: ``--slo ttft:p99<=500 --slo tpot:p99<=50``.

Syntax: ``METRIC:STAT<=MS`` with METRIC one of ttft, tpot, itl, e2el and STAT one of mean,
p50, p90, p95, p99, p99.9; ``<`` is read as ``<=``. ``METRIC:MS`` (``--goodput``'s form) means
P99. A run meets the SLOs when every one holds on its measured window and no more than
``MAX_FAILED_SHARE`` of its requests failed (a config that errors under load serves nobody).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pydantic import BaseModel

from servetune.errors import ConfigError
from servetune.results.schema import Slo, Summary
from servetune.results.slo import SLO_NAMES as _NAMES
from servetune.results.slo import SloSpec as SloSpec

MAX_FAILED_SHARE = 0.01
_SPEC = re.compile(
    r"^\s*(?P<metric>[a-z0-9]+)\s*:\s*(?:(?P<stat>mean|median|p[0-9.]+)\s*(?P<op><=|<)\s*)?"
    r"(?P<ms>[0-9]*\.?[0-9]+)\s*(?:ms)?\s*$"
)


def parse_slo(text: str) -> SloSpec:
    m = _SPEC.match(text.lower())
    if m is None or m.group("metric") not in _NAMES:
        raise ConfigError.over_fields(
            f"{{slo}} {text!r}: expected METRIC:STAT<=MS, METRIC one of ttft, tpot, itl, e2el",
            hint="e.g. ttft:p99<=500 and tpot:p99<=50 (or ttft:500 for P99)",
        )
    stat = (m.group("stat") or "p99").replace("median", "p50")
    if stat == "p99.9":
        stat = "p999"
    if stat not in ("mean", "p50", "p90", "p95", "p99", "p999"):
        raise ConfigError.over_fields(
            f"{{slo}} {text!r}: {stat} is not a statistic servetune records",
            hint="use mean, p50, p90, p95, p99 or p99.9",
        )
    ms = float(m.group("ms"))
    if ms <= 0:
        raise ConfigError.over_fields(f"{{slo}} {text!r}: the limit must be > 0 ms")
    return SloSpec(metric=m.group("metric"), stat=stat, limit_ms=ms)  # type: ignore[arg-type]


def parse_slos(items: Sequence[str] | None) -> list[SloSpec]:
    out: list[SloSpec] = []
    for item in items or ():
        for part in item.split(","):
            if part.strip():
                out.append(parse_slo(part))
    return out


def p99_slo(slos: Sequence[SloSpec], field: str = "slo") -> Slo:
    """The P99 limits of ``slos`` as an :class:`Slo`, for what judges P99s only (the capacity
    planner); any other statistic or metric is refused by name rather than dropped."""
    other = [s.text() for s in slos if s.stat != "p99" or s.metric == "itl"]
    if other:
        raise ConfigError.over_fields(
            "{" + field + "}" + f": {', '.join(other)}: this judges P99 TTFT, TPOT and E2E only",
            hint="e.g. ttft:p99<=500 tpot:p99<=50 (or ttft:500 tpot:50)",
        )
    return as_goodput(slos)


def as_goodput(slos: Sequence[SloSpec]) -> Slo:
    """The per-request goodput SLO closest to these (the P99 limits; vLLM's keys)."""
    values: dict[str, float] = {}
    for s in slos:
        if s.metric in ("ttft", "tpot", "e2el"):
            values[s.metric] = min(values.get(s.metric, s.limit_ms), s.limit_ms)
    return Slo(**values)


class SloCheck(BaseModel):
    """How one run stands against the SLOs."""

    meets: bool
    limiting: str | None = None
    """The SLO furthest beyond its limit (or closest to it when all hold)."""
    worst_ratio: float | None = None
    """Largest value / limit over the SLOs (≤ 1 when all hold)."""
    failed_share: float = 0.0
    detail: dict[str, float | None] = {}


def check(summary: Summary, slos: Sequence[SloSpec]) -> SloCheck:
    total = summary.completed + summary.failed
    failed_share = summary.failed / total if total else 1.0
    detail: dict[str, float | None] = {}
    worst: tuple[float, str] | None = None
    meets = summary.completed > 0
    for s in slos:
        v = s.value(summary)
        detail[s.text()] = v
        if v is None:
            meets = False
            continue
        ratio = v / s.limit_ms
        if worst is None or ratio > worst[0]:
            worst = (ratio, s.text())
        if v > s.limit_ms:
            meets = False
    if failed_share > MAX_FAILED_SHARE:
        meets = False
        worst = (max(worst[0] if worst else 0.0, 1.0 + failed_share), "failed requests")
    return SloCheck(
        meets=meets,
        limiting=worst[1] if worst else None,
        worst_ratio=worst[0] if worst else None,
        failed_share=failed_share,
        detail=detail,
    )
