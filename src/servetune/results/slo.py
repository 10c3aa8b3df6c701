"""One latency SLO as a result file holds it (``tune.json``'s spec, a plan's): ``stat`` of
``metric`` at most ``limit_ms``. The ``--slo`` syntax that makes one and the check of a run
against several live in :mod:`servetune.metrics.slo_spec`."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from servetune.results.schema import Stats, Summary

Metric = Literal["ttft", "tpot", "itl", "e2el"]
Stat = Literal["mean", "p50", "p90", "p95", "p99", "p999"]
SLO_NAMES = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2E"}


class SloSpec(BaseModel):
    """One SLO: ``stat`` of ``metric`` at most ``limit_ms``."""

    metric: Metric
    stat: Stat = "p99"
    limit_ms: float

    def text(self) -> str:
        stat = "P99.9" if self.stat == "p999" else self.stat.upper()
        stat = "mean" if self.stat == "mean" else stat
        return f"{stat} {SLO_NAMES[self.metric]} ≤ {self.limit_ms:g} ms"

    def value(self, summary: Summary) -> float | None:
        stats: Stats = getattr(summary, self.metric)
        v = getattr(stats, self.stat)
        return None if v is None else float(v)
