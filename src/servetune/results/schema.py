"""Pydantic schemas of the files in a run directory (the contract between commands).

``run.json`` is a :class:`RunResult` with the ``vllm bench serve`` keys added flat at the top
level (see :mod:`servetune.results.vllm_keys`); ``requests.jsonl`` holds one
:class:`~servetune.results.record.RequestRecord` a line.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    model_validator,
)

from servetune.checks import SECONDS, Invalid
from servetune.results.conversation import (
    CacheFigures,
    MultiturnConfig,
    SessionFigures,
    TraceConfig,
)

SCHEMA_VERSION = 1

Endpoint = Literal["completions", "chat"]
DatasetName = Literal["random", "sharegpt", "jsonl", "prefix", "multiturn", "trace"]
Arrival = Literal["poisson", "gamma", "constant"]
PercentileMetric = Literal["ttft", "tpot", "itl", "e2el"]
RunStatus = Literal["running", "complete", "degraded", "failed", "interrupted", "cut_short"]
"""running: the run is under way (``run.json`` is written at the start and kept current);
complete: it ended and at most ``max_failure_rate`` of its requests failed; degraded: more
failed than that, but most succeeded; failed: more failed than that and fewer than half
succeeded (none at all, or a broken level), or no request fell in the measured window
(``--warmup``/``--cooldown`` covered the run); interrupted: stopped by Ctrl-C / SIGTERM;
cut_short: ``run.json`` still said running when it was read, and the process that wrote it is
gone (killed): what is shown was summarised from the records on disk."""

DEFAULT_MAX_FAILURE_RATE = 0.05
DEFAULT_PERCENTILE_METRICS: tuple[PercentileMetric, ...] = ("ttft", "tpot", "itl")
DEFAULT_METRIC_PERCENTILES: tuple[float, ...] = (99.0,)


def rate_to_json(rate: float) -> float | str:
    """vLLM writes an unbounded rate as the string "inf"; so do we."""
    return "inf" if math.isinf(rate) else rate


def rate_from_json(value: Any) -> float:
    if value is None or (isinstance(value, str) and value.lower() in ("inf", "infinity")):
        return math.inf
    return float(value)


Rate = Annotated[
    float, BeforeValidator(rate_from_json), PlainSerializer(rate_to_json, return_type=float | str)
]
"""req/s, where ``inf`` (every request at once) is written ``"inf"``: JSON has no infinity."""


class Slo(BaseModel):
    """Latency service-level objectives in milliseconds (vLLM's ``--goodput`` keys)."""

    model_config = ConfigDict(extra="forbid")

    ttft: float | None = None
    tpot: float | None = None
    e2el: float | None = None

    def is_empty(self) -> bool:
        return self.ttft is None and self.tpot is None and self.e2el is None


class BenchConfig(BaseModel):
    """Every knob of one load test: target, workload, arrivals and client behaviour."""

    model_config = ConfigDict(extra="ignore")

    base_url: str | None = None
    """None = the embedded simulated engine."""
    model: str | None = None
    endpoint: Endpoint = "completions"
    api_key: str | None = None

    dataset_name: DatasetName = "random"
    dataset_path: str | None = None
    random_input_len: int = Field(1024, ge=1, examples=[1024])
    random_output_len: int = Field(128, ge=1, examples=[128])
    random_range_ratio: float = Field(0.0, ge=0, lt=1, allow_inf_nan=False, examples=[0.5])
    """Lengths drawn from L·(1 − r) to L·(1 + r); 0 for fixed lengths."""
    prefix_num_groups: int = 8
    prefix_len: int = 512
    sharegpt_output_len: int | None = None
    multiturn: MultiturnConfig = Field(default_factory=MultiturnConfig)
    """Sessions (``--dataset-name multiturn``): turns, system prompts, think time, context cap."""
    trace: TraceConfig = Field(default_factory=TraceConfig)
    """Trace replay (``--dataset-name trace``): format, time scale, window."""
    tokenizer: str | None = None
    """Local HF tokenizer folder or tokenizer.json; None = server /tokenize, else approximate."""

    num_prompts: int = Field(1000, ge=1, examples=[1000])
    duration_s: float | None = Field(
        None, gt=0, allow_inf_nan=False, examples=[60], json_schema_extra=SECONDS
    )
    request_rate: Rate = Field(math.inf, gt=0, examples=[10, "inf"])
    burstiness: float = Field(1.0, gt=0, allow_inf_nan=False, examples=[0.5])
    """The gamma arrivals' shape: < 1 burstier than Poisson, 1 Poisson."""
    arrival: Arrival = "poisson"
    max_concurrency: int | None = Field(None, ge=1, examples=[32])
    seed: int = Field(0, ge=0, examples=[0])

    warmup_s: float = Field(
        0.0, ge=0, allow_inf_nan=False, examples=[10], json_schema_extra=SECONDS
    )
    cooldown_s: float = Field(
        0.0, ge=0, allow_inf_nan=False, examples=[10], json_schema_extra=SECONDS
    )
    ignore_eos: bool = False
    """vLLM bench serve's default: off (outputs may stop at EOS, shorter than asked)."""
    max_failure_rate: float = DEFAULT_MAX_FAILURE_RATE
    """Share of failed requests above which the run is ``degraded`` or ``failed``."""
    percentile_metrics: list[PercentileMetric] = Field(
        default_factory=lambda: list(DEFAULT_PERCENTILE_METRICS)
    )
    """vLLM's ``--percentile-metrics``: the metrics the summary reports percentiles of."""
    metric_percentiles: list[float] = Field(
        default_factory=lambda: list(DEFAULT_METRIC_PERCENTILES)
    )
    """vLLM's ``--metric-percentiles``: which percentiles (0–100) of those metrics."""
    temperature: float = Field(0.0, ge=0, allow_inf_nan=False, examples=[0, 1])
    request_timeout_s: float = Field(
        600.0, gt=0, allow_inf_nan=False, examples=[600], json_schema_extra=SECONDS
    )
    workers: int | None = Field(None, ge=1)
    http_client: Literal["fast", "aiohttp"] = "fast"
    goodput: Slo = Field(default_factory=Slo)
    label: str | None = None

    @model_validator(mode="after")
    def _consistent(self) -> BenchConfig:
        if self.arrival == "constant" and self.burstiness != 1.0:
            # the gaps are all 1/rate: the shape would be dropped without a word
            raise Invalid(
                f"{{burstiness}} {self.burstiness:g} shapes random gaps, and {{arrival}} "
                "constant spaces the requests evenly",
                hint="drop {burstiness}, or use {arrival} gamma (or poisson) for bursty arrivals",
            )
        if self.dataset_path is None and self.dataset_name in ("sharegpt", "jsonl"):
            raise Invalid(
                f"{{dataset_name}} {self.dataset_name} needs {{dataset_path}} FILE",
                hint="give the file, or use {dataset_name} random",
            )
        if self.dataset_path is not None and self.dataset_name in ("random", "prefix"):
            # read by nobody: the run would send synthetic prompts the user did not ask for
            raise Invalid(
                f"{{dataset_path}} {self.dataset_path} is not read by {{dataset_name}} "
                f"{self.dataset_name} (synthetic prompts)",
                hint="add {dataset_name} jsonl or sharegpt to send the file's prompts, or drop "
                "{dataset_path}",
            )
        if (
            self.dataset_name == "trace"
            and self.trace.time_scale != 1.0
            and not math.isinf(self.request_rate)
        ):
            raise Invalid(
                f"{{trace_time_scale}} {self.trace.time_scale:g} and {{request_rate}} "
                f"{self.request_rate:g} both set the trace's pace",
                hint="give one: {request_rate} N replays the trace's shape at N req/s, "
                "{trace_time_scale} F multiplies its own gaps by F",
            )
        if self.duration_s is not None and self.warmup_s + self.cooldown_s >= self.duration_s:
            # the summary's window would be empty: a run that measures nothing, exit 0
            raise Invalid(
                f"{{warmup_s}} {self.warmup_s:g} s + {{cooldown_s}} {self.cooldown_s:g} s leave "
                f"nothing of {{duration_s}} {self.duration_s:g} s to measure",
                hint="shorten the warm-up / cool-down, or lengthen {duration_s}",
            )
        return self


class Stats(BaseModel):
    """Distribution of one metric; percentiles interpolate linearly (numpy's default)."""

    count: int = 0
    mean: float | None = None
    std: float | None = None
    min: float | None = None
    max: float | None = None
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    p999: float | None = None
    p99_ci: tuple[float, float] | None = None
    """Bootstrap 95% confidence interval of p99."""
    unit: str = "ms"


class Summary(BaseModel):
    """Client-side figures over the measured window (warm-up and cool-down excluded)."""

    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    excluded: int = 0
    """Requests outside the measured window (warm-up / cool-down)."""
    window_start_s: float = 0.0
    window_end_s: float = 0.0
    duration_s: float = 0.0
    total_input_tokens: int = 0
    total_output_tokens: int = 0
    request_throughput: float = 0.0
    output_throughput: float = 0.0
    total_token_throughput: float = 0.0
    request_goodput: float | None = None
    good_requests: int | None = None
    max_concurrent_requests: int = 0
    mean_concurrency: float = 0.0
    """Time-averaged requests in flight over the window (Little's law, measured)."""
    ttft: Stats = Field(default_factory=Stats)
    tpot: Stats = Field(default_factory=Stats)
    itl: Stats = Field(default_factory=Stats)
    e2el: Stats = Field(default_factory=Stats)
    ttft_from_scheduled: Stats = Field(default_factory=Stats)
    e2el_from_scheduled: Stats = Field(default_factory=Stats)
    """Latencies measured from the *scheduled* send time (coordinated omission included)."""
    output_tokens_per_request: Stats = Field(default_factory=lambda: Stats(unit="tokens"))
    input_tokens_per_request: Stats = Field(default_factory=lambda: Stats(unit="tokens"))
    tokens_source: dict[str, int] = Field(default_factory=dict)
    errors: dict[str, int] = Field(default_factory=dict)
    """Failure reasons and how often each occurred."""
    error_classes: dict[str, int] = Field(default_factory=dict)
    """Failed requests in the window by class (``servetune.results.record.ERROR_CLASSES``)."""
    short_outputs: int = 0
    """Successful requests that generated fewer tokens than asked (max_tokens)."""
    short_output_tokens: int = 0
    """Tokens those short outputs were missing, together."""
    cache: CacheFigures | None = None
    """Prompt tokens the server said it served from its prefix cache (None: no answer said)."""
    sessions: SessionFigures | None = None
    """Session workloads: sessions, and latency by turn index and by session."""
    percentiles: dict[str, dict[str, float | None]] = Field(default_factory=dict)
    """vLLM's selection: metric → {"99": value, "99.9": value, …} for ``percentile_metrics`` ×
    ``metric_percentiles`` (keys written as vLLM does: 99, not 99.0)."""


def percentile_word(p: float) -> str:
    """vLLM's spelling of a percentile in key names: 99 → "99", 99.9 → "99.9"."""
    return str(int(p)) if int(p) == p else str(p)


class Failures(BaseModel):
    """The run's verdict on failures: every request that ended (warm-up and cool-down included,
    cancelled ones not), how many failed, why, and what that makes the run."""

    requests: int = 0
    failed: int = 0
    share: float = 0.0
    max_share: float = DEFAULT_MAX_FAILURE_RATE
    """The threshold (``--max-failure-rate``)."""
    classes: dict[str, int] = Field(default_factory=dict)
    """Failed requests by class, most frequent first."""
    examples: dict[str, str] = Field(default_factory=dict)
    """One message per class, as the first such failure said it."""
    verdict: str = ""
    """One sentence: what failed and what it makes the run."""

    @property
    def over(self) -> bool:
        return self.requests > 0 and self.share > self.max_share


class ClientHealth(BaseModel):
    """Could the client keep the rate it claims? (send lag and achieved rate)."""

    target_rate: Rate | None = None
    """Planned request rate (req/s); None for a closed loop or an unbounded rate."""
    planned_rate: float | None = None
    """The rate the drawn plan realizes over the requests sent ((n − 1) / span of schedule)."""
    achieved_rate: float | None = None
    """Requests actually sent per second over the sending period ((n − 1) / span of sends)."""
    send_lag: Stats = Field(default_factory=Stats)
    """send − eligible: how late the client itself was."""
    queue_delay: Stats = Field(default_factory=Stats)
    """send − scheduled: limiter wait plus client lateness."""
    workers: int = 1
    cpu_s: float | None = None
    """CPU seconds the client (all its processes) used during the load."""
    cpu_per_request_ms: float | None = None
    arrival_stamps: Literal["kernel", "user", "mixed"] | None = None
    """Who stamped the response bytes' arrival times: the kernel (SO_TIMESTAMPNS, immune to
    the client's own scheduling delays), the client's event loop, or both (e.g. the first
    packets before the kernel turned stamping on)."""
    kernel_stamped_share: float | None = None
    """Share of response reads that carried a kernel arrival stamp."""
    behind: bool = False
    warnings: list[str] = Field(default_factory=list)


class Environment(BaseModel):
    servetune_version: str
    python: str
    platform: str
    hostname: str
    cpu_count: int
    started_at: str
    """ISO-8601 UTC wall-clock time at the run's start."""
    command: list[str] = Field(default_factory=list)
    clock_t0_ns: int | None = None
    """``time.perf_counter_ns()`` (CLOCK_MONOTONIC) at the run's t0: add it to a record's
    times to line them up with other logs of this machine taken on the same clock."""


class TargetInfo(BaseModel):
    base_url: str
    model: str
    served_models: list[str] = Field(default_factory=list)
    max_model_len: int | None = None
    simulated: dict[str, Any] | None = None
    """The simulated engine's configuration when the target is the embedded engine."""
    tokenizer: str = "approximate"
    """Which token counter shaped the prompts: a path, "server" (/tokenize) or "approximate"."""
    tokens_approximate: bool = True


class ServerInfo(BaseModel):
    """What the /metrics scraper found (filled by metrics/; absent when not scraped)."""

    engine: str | None = None
    metrics_url: str | None = None
    names_found: dict[str, str] = Field(default_factory=dict)
    names_missing: list[str] = Field(default_factory=list)
    samples: int = 0
    error: str | None = None
    summary: dict[str, Any] = Field(default_factory=dict)


class WorkloadFacts(BaseModel):
    """What the workload itself implies, so that a reader can judge the server's figures by it
    (``workload/prefix_share.py`` has the definitions)."""

    seed: int
    """The seed the prompts and arrivals were drawn with (``--seed`` repeats them)."""
    requests: int = 0
    distinct_prompts: int = 0
    mean_prompt_tokens: float | None = None
    implied_prefix_hit_rate: float | None = None
    """Share of prompt tokens an unbounded prefix cache could serve from this run's own
    prompts, in send order (0–1)."""
    prefix_hit_rate_ceiling: float | None = None
    """The highest prefix-cache hit rate the server may report before the run is flagged as
    measuring the cache (implied + chat-template allowance + tolerance)."""


class RunResult(BaseModel):
    """``run.json``: one load test, self-describing."""

    model_config = ConfigDict(extra="ignore")

    schema_version: int = SCHEMA_VERSION
    kind: Literal["run"] = "run"
    label: str | None = None
    status: RunStatus = "complete"
    failures: Failures | None = None
    """The failure verdict (None on files written before it existed)."""
    pid: int | None = None
    """The process writing the run (while ``status`` is running)."""
    updated_at: str | None = None
    """ISO-8601 UTC time ``run.json`` was last written."""
    config: BenchConfig
    environment: Environment
    target: TargetInfo
    client_health: ClientHealth
    summary: Summary
    server: ServerInfo | None = None
    workload: WorkloadFacts | None = None
    metric_definitions: dict[str, str] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)
