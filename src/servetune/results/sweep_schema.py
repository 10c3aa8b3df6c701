"""``sweep.json``: one sweep over rising load — the curve (one row per level run), the knee with
its evidence and confidence, the SLO-max rate, and warnings.

Every level is also a complete RUN_DIR under ``levels/<label>/``; a row repeats the figures the
curve needs so that ``sweep.json`` alone draws the curve. Rates are req/s (``inf`` is written as
the string ``"inf"``, as vLLM does), latencies milliseconds.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
)

from servetune.results.jsonfile import read_model_file, write_json_atomic
from servetune.results.schema import BenchConfig, Rate, RunStatus, Slo

SWEEP_SCHEMA_VERSION = 1

LoadMode = Literal["rate", "concurrency"]
TargetKind = Literal["url", "embedded", "offline", "custom"]
LevelRole = Literal["level", "probe", "confirm"]
MetricName = Literal["ttft", "tpot", "e2el"]
KneeStatus = Literal["found", "below_range", "above_range", "no_clear_knee", "insufficient"]
"""found: inside the swept range; below_range: at or below the lowest level (the sweep
saturated at once); above_range: the sweep never saturated; no_clear_knee: throughput stopped
rising but latency did not turn up clearly; insufficient: too few usable levels."""
Confidence = Literal["high", "medium", "low"]


class PlannedLevel(BaseModel):
    """One load level to run: an offered request rate or a concurrency cap."""

    label: str
    """Folder name under ``levels/`` (``rate-32``, ``conc-8``, ``probe-inf``, …)."""
    mode: LoadMode
    value: Rate
    """req/s (``inf`` allowed for the probe) or the concurrency cap."""
    role: LevelRole = "level"
    repeat: int = 0
    """0 for the first run of a load; 1, 2, … for ``--repeats`` (each with a seed of its own)."""


class SweepConfig(BaseModel):
    """What was swept and how; ``--resume`` refuses a sweep whose config differs."""

    model_config = ConfigDict(extra="ignore")

    bench: BenchConfig
    """The base configuration of every level (rate or concurrency set per level)."""
    mode: LoadMode = "rate"
    request_rates: list[Rate] | Literal["auto"] | None = None
    concurrencies: list[int] | None = None
    auto_levels: int = 8
    repeats: int = 1
    """Runs per load level (different seeds): their spread feeds the knee's confidence."""
    target: TargetKind = "url"
    engine: dict[str, Any] | None = None
    """The simulated engine's configuration when the target is the embedded or offline sim."""
    server_cmd: str | None = None
    restart_per_level: bool = False
    scrape_metrics: bool = True
    knee_k: float = 2.0
    confirm: bool = False


class ServerMeans(BaseModel):
    """The server's own view of one level, averaged over the measured window."""

    samples: int = 0
    kv_cache_usage_mean: float | None = None
    kv_cache_usage_max: float | None = None
    running_mean: float | None = None
    running_max: float | None = None
    waiting_mean: float | None = None
    waiting_max: float | None = None
    preemptions: float | None = None
    """Preemptions counted inside the window."""
    preemptions_per_s: float | None = None
    gpu_utilization_mean: float | None = None
    prefix_cache_hit_rate: float | None = None
    """Share of prompt tokens the server served from its prefix cache in the window."""


class LevelRow(BaseModel):
    """One level run: offered load, what was achieved, latencies, server means."""

    label: str
    role: LevelRole = "level"
    level_dir: str
    """Relative to the sweep directory."""
    mode: LoadMode
    offered_rate: Rate | None = None
    """Planned req/s (``inf`` for an unbounded rate); None for a pure concurrency level."""
    concurrency: int | None = None
    status: RunStatus = "complete"
    """The level's run status: only ``complete`` levels draw the knee and the SLO-max (a
    degraded or failed level's latencies describe only the requests that succeeded)."""
    completed: int = 0
    failed: int = 0
    failure_share: float | None = None
    """Failed / ended requests over the whole level (warm-up included)."""
    error_classes: dict[str, int] = Field(default_factory=dict)
    """The level's failed requests by class."""
    short_outputs: int = 0
    duration_s: float = 0.0
    achieved_send_rate: float | None = None
    """Requests the client actually sent per second (its own health figure)."""
    request_throughput: float = 0.0
    output_throughput: float = 0.0
    total_token_throughput: float = 0.0
    request_goodput: float | None = None
    ttft_p50: float | None = None
    ttft_p99: float | None = None
    tpot_p50: float | None = None
    tpot_p99: float | None = None
    e2el_p50: float | None = None
    e2el_p99: float | None = None
    e2el_mean: float | None = None
    itl_p99: float | None = None
    p99_ci: dict[str, tuple[float, float]] = Field(default_factory=dict)
    """Bootstrap 95% interval of each P99 (ttft, tpot, e2el): the within-run spread."""
    client_mean_concurrency: float | None = None
    send_lag_p99: float | None = None
    client_behind: bool = False
    server: ServerMeans | None = None
    prefix_cache_hit_rate_ceiling: float | None = None
    """The most the level's own prompts let a prefix cache serve (``run.json``'s
    ``workload.prefix_hit_rate_ceiling``)."""
    prefix_cache_flagged: bool = False
    """The server's hit rate exceeded that ceiling: the level measured the cache."""
    warnings: list[str] = Field(default_factory=list)

    @property
    def load(self) -> float:
        """The swept quantity: offered rate (rate mode) or concurrency."""
        if self.mode == "concurrency":
            return float(self.concurrency) if self.concurrency is not None else math.inf
        return self.offered_rate if self.offered_rate is not None else math.inf

    def p99(self, metric: MetricName) -> float | None:
        value: float | None = getattr(self, f"{metric}_p99")
        return value


class MetricKnee(BaseModel):
    """The knee of one latency metric's P99 curve."""

    metric: MetricName
    status: KneeStatus
    throughput: float | None = None
    """Achieved req/s at the knee (interpolated)."""
    latency_ms: float | None = None
    """The P99 at the knee (on the monotone fit)."""
    rise: float | None = None
    """How many times the P99 grows from the knee to the highest load swept."""
    bracket: tuple[str, str] | None = None
    """Labels of the measured levels on either side of the knee."""
    evidence: list[str] = Field(default_factory=list)


class Knee(BaseModel):
    """Where P99 latency turns sharply up against throughput: the comfortable operating point."""

    status: KneeStatus
    method: str
    k: float
    binding_metric: MetricName | None = None
    """The metric whose knee comes first (at the lowest throughput)."""
    throughput: float | None = None
    """req/s at the knee."""
    output_throughput: float | None = None
    """Output tok/s at the knee (interpolated)."""
    offered: float | None = None
    """The load knob at the knee: offered req/s (rate sweep) or concurrency (concurrency sweep)."""
    concurrency: float | None = None
    """Comfortable concurrency by Little's law: throughput × mean E2E."""
    concurrency_server: float | None = None
    """The server's mean running requests at the knee (interpolated), when scraped."""
    concurrency_client: float | None = None
    """The client's measured mean requests in flight at the knee (interpolated)."""
    latency_p99_ms: dict[str, float] = Field(default_factory=dict)
    """P99 TTFT / TPOT / E2E at the knee (interpolated)."""
    last_comfortable_level: str | None = None
    """The highest measured level below the knee."""
    bracket: tuple[str, str] | None = None
    confidence: Confidence | None = None
    confidence_reasons: list[str] = Field(default_factory=list)
    evidence: list[str] = Field(default_factory=list)
    per_metric: list[MetricKnee] = Field(default_factory=list)
    verdict: str = ""
    """One sentence for a person."""
    suggested_loads: list[float] = Field(default_factory=list)
    """Rates (or concurrencies) to sweep next when the knee is not pinned down."""


class SloMax(BaseModel):
    """The highest load whose P99s meet every SLO given (GuideLLM's question, answered here)."""

    slo: Slo
    status: Literal["found", "all_meet", "none_meet", "insufficient"]
    offered: float | None = None
    """Offered req/s (rate sweep) or concurrency (concurrency sweep) at the SLO limit."""
    throughput: float | None = None
    limiting_metric: MetricName | None = None
    bracket: tuple[str, str] | None = None
    interpolated: bool = False
    confirmed: bool | None = None
    """None: not checked; True/False: one more level run at ``offered`` met / missed the SLOs."""
    confirm_label: str | None = None
    evidence: list[str] = Field(default_factory=list)
    verdict: str = ""
    suggested_loads: list[float] = Field(default_factory=list)


class SweepResult(BaseModel):
    """``sweep.json``."""

    model_config = ConfigDict(extra="ignore")

    schema_version: int = SWEEP_SCHEMA_VERSION
    kind: Literal["sweep"] = "sweep"
    status: Literal["running", "complete", "degraded", "failed", "interrupted", "cut_short"] = (
        "running"
    )
    """complete: every level complete; degraded: some levels failed more requests than
    ``--max-failure-rate`` allows (left out of the knee); failed: no level was usable;
    interrupted: Ctrl-C; cut_short: set when read — sweep.json still said running and its
    process is gone (killed)."""
    created_at: str
    updated_at: str
    pid: int | None = None
    """The process running the sweep (while status is running)."""
    hostname: str | None = None
    command: list[str] = Field(default_factory=list)
    config: SweepConfig
    planned: list[PlannedLevel] = Field(default_factory=list)
    rows: list[LevelRow] = Field(default_factory=list)
    knee: Knee | None = None
    slo_max: SloMax | None = None
    warnings: list[str] = Field(default_factory=list)

    def measured_rows(self) -> list[LevelRow]:
        """Rows in load order (probe and confirm levels included)."""
        return sorted(self.rows, key=lambda r: (r.load, r.label))


def write_sweep_result(sweep_dir: str | Path, result: SweepResult) -> Path:
    """Write ``sweep.json`` atomically (a kill never leaves half a file)."""
    return write_json_atomic(Path(sweep_dir) / "sweep.json", result.model_dump(mode="json"))


def read_sweep_result(sweep_dir: str | Path) -> SweepResult:
    """Read ``sweep.json``, refusing foreign files and newer schema versions clearly."""
    path = Path(sweep_dir) / "sweep.json"
    return read_model_file(path, SweepResult, "sweep", SWEEP_SCHEMA_VERSION, "sweep.json")
