"""The one assembly of ``run.json``'s :class:`~servetune.results.schema.RunResult`, whatever
ran the load (the real-time client, the offline simulator, the synthetic engine).

It fixes what every run records the same way: the label comes from the configuration, the API
key is never written, the summary covers the configuration's measured window (warm-up and
cool-down out), the metric definitions travel with the figures, and the client's own warnings
come first.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from servetune.metrics.summary import METRIC_DEFINITIONS, ItlSource, summarize
from servetune.results.record import RequestRecord
from servetune.results.schema import (
    BenchConfig,
    ClientHealth,
    Environment,
    Failures,
    RunResult,
    RunStatus,
    ServerInfo,
    Summary,
    TargetInfo,
    WorkloadFacts,
)


def run_summary(
    records: Sequence[RequestRecord], cfg: BenchConfig, itl_ms: ItlSource | None = None
) -> Summary:
    """The client-side summary over ``cfg``'s measured window, with its goodput SLOs and the
    percentiles it asks for (``--percentile-metrics`` × ``--metric-percentiles``); ``itl_ms``:
    see :data:`~servetune.metrics.summary.ItlSource`."""
    return summarize(
        records,
        cfg.warmup_s,
        cfg.cooldown_s,
        cfg.goodput,
        cfg.percentile_metrics,
        cfg.metric_percentiles,
        itl_ms,
    )


def run_result(
    cfg: BenchConfig,
    summary: Summary,
    *,
    environment: Environment,
    target: TargetInfo,
    health: ClientHealth,
    server: ServerInfo | None = None,
    status: RunStatus = "complete",
    failures: Failures | None = None,
    workload: WorkloadFacts | None = None,
    warnings: Iterable[str] = (),
) -> RunResult:
    return RunResult(
        label=cfg.label,
        status=status,
        failures=failures,
        config=cfg.model_copy(update={"api_key": None}),
        environment=environment,
        target=target,
        client_health=health,
        summary=summary,
        server=server,
        workload=workload,
        metric_definitions=dict(METRIC_DEFINITIONS),
        warnings=[*health.warnings, *warnings],
    )
