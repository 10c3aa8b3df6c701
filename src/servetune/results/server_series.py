"""ServerSeries: the server's own metrics over a run, one sample a line in
``server_metrics.jsonl``.

Values are stored under engine-neutral *concepts* (the rows of DESIGN.md's table), whatever
the engine called them; the result's ``server.names_found`` says which name fed which concept.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from servetune.profiles.concepts import (  # the concepts, re-exported
    DECODE_SECONDS as DECODE_SECONDS,
)
from servetune.profiles.concepts import (
    E2E_SECONDS as E2E_SECONDS,
)
from servetune.profiles.concepts import (
    GAUGE_CONCEPTS as GAUGE_CONCEPTS,
)
from servetune.profiles.concepts import (
    GENERATION_TOKENS_TOTAL as GENERATION_TOKENS_TOTAL,
)
from servetune.profiles.concepts import (
    GPU_MEMORY_TOTAL_BYTES as GPU_MEMORY_TOTAL_BYTES,
)
from servetune.profiles.concepts import (
    GPU_MEMORY_USED_BYTES as GPU_MEMORY_USED_BYTES,
)
from servetune.profiles.concepts import (
    GPU_UTILIZATION as GPU_UTILIZATION,
)
from servetune.profiles.concepts import (
    HISTOGRAM_CONCEPTS as HISTOGRAM_CONCEPTS,
)
from servetune.profiles.concepts import (
    ITL_SECONDS as ITL_SECONDS,
)
from servetune.profiles.concepts import (
    KV_CACHE_USAGE as KV_CACHE_USAGE,
)
from servetune.profiles.concepts import (
    PREEMPTIONS_TOTAL as PREEMPTIONS_TOTAL,
)
from servetune.profiles.concepts import (
    PREFILL_SECONDS as PREFILL_SECONDS,
)
from servetune.profiles.concepts import (
    PREFIX_CACHE_HIT_RATE as PREFIX_CACHE_HIT_RATE,
)
from servetune.profiles.concepts import (
    PREFIX_CACHE_HITS_TOTAL as PREFIX_CACHE_HITS_TOTAL,
)
from servetune.profiles.concepts import (
    PREFIX_CACHE_QUERIES_TOTAL as PREFIX_CACHE_QUERIES_TOTAL,
)
from servetune.profiles.concepts import (
    PROMPT_TOKENS_TOTAL as PROMPT_TOKENS_TOTAL,
)
from servetune.profiles.concepts import (
    QUEUE_SECONDS as QUEUE_SECONDS,
)
from servetune.profiles.concepts import (
    REQUESTS_ABORTED_TOTAL as REQUESTS_ABORTED_TOTAL,
)
from servetune.profiles.concepts import (
    REQUESTS_FINISHED_TOTAL as REQUESTS_FINISHED_TOTAL,
)
from servetune.profiles.concepts import (
    RUNNING as RUNNING,
)
from servetune.profiles.concepts import (
    TPOT_SECONDS as TPOT_SECONDS,
)
from servetune.profiles.concepts import (
    TTFT_SECONDS as TTFT_SECONDS,
)
from servetune.profiles.concepts import (
    WAITING as WAITING,
)


class Histogram(BaseModel):
    """A cumulative Prometheus histogram snapshot: (upper bound, cumulative count) pairs."""

    buckets: list[tuple[float, float]]
    sum: float = 0.0
    count: float = 0.0


class ServerSample(BaseModel):
    """One scrape of the server's metrics."""

    t: float
    """Seconds since the run's start, on the run clock."""
    values: dict[str, float] = Field(default_factory=dict)
    histograms: dict[str, Histogram] = Field(default_factory=dict)
