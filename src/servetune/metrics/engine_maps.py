"""Which Prometheus name feeds which concept, per engine and version — as data.

Each :class:`EngineMap` lists, for every concept it knows, candidate sources in order of
preference (newest name first); the first one the server exposes wins. A map is picked by
:func:`detect` from the names a ``/metrics`` page holds: the family prefix says the engine,
``markers`` / ``absent`` say the version. Concepts a map lists but the server does not expose
are reported as missing, never an error (llama.cpp's recent builds, for one, dropped their
KV-usage gauge).

Sources of the names (checked 2026-12):
- vLLM V1 (≥0.10): ``vllm/v1/metrics/loggers.py`` (PrometheusStatLogger; labels
  ``model_name``, ``engine``; ``request_success_total{finished_reason=stop|length|abort}``),
  a v0.10.2 capture, and the vLLM CPU 0.32 build of docs/real-engines.md
  (``inter_token_latency_seconds``, ``request_time_per_output_token_seconds``).
- vLLM 0.8–0.9: ``vllm/engine/metrics.py`` (V0 engine: ``gpu_cache_usage_perc``,
  ``num_requests_swapped``, ``gpu_prefix_cache_hit_rate``) and the early V1 logger
  (``gpu_prefix_cache_{hits,queries}_total``); both have ``time_per_output_token_seconds``, a
  histogram of per-iteration token gaps — our ITL, not a per-request TPOT.
- SGLang: ``python/sglang/srt/metrics/collector.py`` and docs/references/production_metrics.md
  (its 2024 example: ``name=`` label, ``num_requests_running``, ``cache_hit_rate`` in percent,
  ``waiting_request_latency_seconds``).
- TGI: docs/source/reference/metrics.md (metrics-exporter-prometheus, no ``_total`` suffixes;
  ``*_duration`` histograms in seconds).
- llama.cpp: tools/server README and REAL_ENGINES.md (build 11434 has no KV gauge; older
  builds had ``llamacpp:kv_cache_usage_ratio`` and ``llamacpp:kv_cache_tokens``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from servetune.results import server_series as ss

Agg = Literal["sum", "mean", "max"]


@dataclass(frozen=True)
class Source:
    """One exposed series set: a sample name (or a histogram's base name), an optional label
    filter, how several label sets combine, and a scale to our units."""

    name: str
    match: tuple[tuple[str, str], ...] = ()
    agg: Agg = "sum"
    """sum for counts and counters; mean for ratios such as KV use (one series per DP engine)."""
    scale: float = 1.0

    @property
    def match_dict(self) -> dict[str, str]:
        return dict(self.match)

    def display(self) -> str:
        """The name as a person would grep for it: ``name{label="value"}``."""
        if not self.match:
            return self.name
        inner = ",".join(f'{k}="{v}"' for k, v in self.match)
        return f"{self.name}{{{inner}}}"


def _s(*names: str, agg: Agg = "sum") -> tuple[Source, ...]:
    return tuple(Source(n, agg=agg) for n in names)


@dataclass(frozen=True)
class EngineMap:
    engine: str
    """Engine id: vllm, sglang, tgi, llamacpp, sim."""
    version: str
    """Which releases this map describes, for people (``V1 (>=0.10)``)."""
    prefix: str
    """Every name of this engine starts with it; it decides the engine."""
    values: Mapping[str, tuple[Source, ...]]
    """Gauge / counter concept → candidates, first exposed wins."""
    histograms: Mapping[str, tuple[Source, ...]] = field(default_factory=dict)
    """Histogram concept (seconds) → candidate base names (``foo`` for ``foo_bucket`` …)."""
    markers: tuple[str, ...] = ()
    """All of these must be exposed for this version to be chosen."""
    absent: tuple[str, ...] = ()
    """None of these may be exposed for this version to be chosen."""

    @property
    def label(self) -> str:
        return f"{self.engine} {self.version}"

    def concepts(self) -> list[str]:
        return [*self.values, *self.histograms]

    def base_names(self) -> set[str]:
        names = {src.name for srcs in self.values.values() for src in srcs}
        names |= {src.name for srcs in self.histograms.values() for src in srcs}
        names.update(self.markers, self.absent)
        return names


_ABORT = (("finished_reason", "abort"),)

VLLM_V1 = EngineMap(
    engine="vllm",
    version="V1 (>=0.10)",
    prefix="vllm:",
    markers=("vllm:kv_cache_usage_perc",),
    values={
        ss.KV_CACHE_USAGE: _s("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", agg="mean"),
        ss.RUNNING: _s("vllm:num_requests_running"),
        ss.WAITING: _s("vllm:num_requests_waiting"),
        ss.PREEMPTIONS_TOTAL: _s("vllm:num_preemptions_total"),
        ss.PROMPT_TOKENS_TOTAL: _s("vllm:prompt_tokens_total"),
        ss.GENERATION_TOKENS_TOTAL: _s("vllm:generation_tokens_total"),
        ss.REQUESTS_FINISHED_TOTAL: _s("vllm:request_success_total"),
        ss.REQUESTS_ABORTED_TOTAL: (Source("vllm:request_success_total", match=_ABORT),),
        ss.PREFIX_CACHE_HITS_TOTAL: _s(
            "vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"
        ),
        ss.PREFIX_CACHE_QUERIES_TOTAL: _s(
            "vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"
        ),
    },
    histograms={
        ss.TTFT_SECONDS: _s("vllm:time_to_first_token_seconds"),
        ss.TPOT_SECONDS: _s("vllm:request_time_per_output_token_seconds"),
        ss.ITL_SECONDS: _s(
            "vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"
        ),
        ss.E2E_SECONDS: _s("vllm:e2e_request_latency_seconds"),
        ss.QUEUE_SECONDS: _s("vllm:request_queue_time_seconds"),
        ss.PREFILL_SECONDS: _s("vllm:request_prefill_time_seconds"),
        ss.DECODE_SECONDS: _s("vllm:request_decode_time_seconds"),
    },
)

_VLLM_08_VALUES: dict[str, tuple[Source, ...]] = {
    ss.KV_CACHE_USAGE: _s("vllm:gpu_cache_usage_perc", agg="mean"),
    ss.RUNNING: _s("vllm:num_requests_running"),
    ss.WAITING: _s("vllm:num_requests_waiting"),
    ss.PREEMPTIONS_TOTAL: _s("vllm:num_preemptions_total"),
    ss.PROMPT_TOKENS_TOTAL: _s("vllm:prompt_tokens_total"),
    ss.GENERATION_TOKENS_TOTAL: _s("vllm:generation_tokens_total"),
    ss.REQUESTS_FINISHED_TOTAL: _s("vllm:request_success_total"),
    ss.REQUESTS_ABORTED_TOTAL: (Source("vllm:request_success_total", match=_ABORT),),
}
_VLLM_08_HISTOGRAMS: dict[str, tuple[Source, ...]] = {
    ss.TTFT_SECONDS: _s("vllm:time_to_first_token_seconds"),
    ss.ITL_SECONDS: _s("vllm:time_per_output_token_seconds"),
    ss.E2E_SECONDS: _s("vllm:e2e_request_latency_seconds"),
    ss.QUEUE_SECONDS: _s("vllm:request_queue_time_seconds"),
    ss.PREFILL_SECONDS: _s("vllm:request_prefill_time_seconds"),
    ss.DECODE_SECONDS: _s("vllm:request_decode_time_seconds"),
}

# 0.8-0.9 running the old V0 engine (VLLM_USE_V1=0): swap space, a prefix hit-rate gauge.
VLLM_V0 = EngineMap(
    engine="vllm",
    version="0.8-0.9 (V0 engine)",
    prefix="vllm:",
    markers=("vllm:gpu_cache_usage_perc", "vllm:num_requests_swapped"),
    absent=("vllm:kv_cache_usage_perc",),
    values={
        **_VLLM_08_VALUES,
        ss.PREFIX_CACHE_HIT_RATE: _s("vllm:gpu_prefix_cache_hit_rate", agg="mean"),
    },
    histograms=_VLLM_08_HISTOGRAMS,
)

# 0.8-0.9 on the V1 engine (the default from 0.8): prefix-cache counters, no swap.
VLLM_V1_EARLY = EngineMap(
    engine="vllm",
    version="0.8-0.9 (V1 engine)",
    prefix="vllm:",
    markers=("vllm:gpu_cache_usage_perc",),
    absent=("vllm:kv_cache_usage_perc",),
    values={
        **_VLLM_08_VALUES,
        ss.PREFIX_CACHE_HITS_TOTAL: _s("vllm:gpu_prefix_cache_hits_total"),
        ss.PREFIX_CACHE_QUERIES_TOTAL: _s("vllm:gpu_prefix_cache_queries_total"),
    },
    histograms=_VLLM_08_HISTOGRAMS,
)

# A vLLM page with neither KV gauge (a partial exporter, a proxy): read what is there.
VLLM_ANY = EngineMap(
    engine="vllm",
    version="unknown version",
    prefix="vllm:",
    values=VLLM_V1.values,
    histograms=VLLM_V1.histograms,
)

SGLANG = EngineMap(
    engine="sglang",
    version="2025+",
    prefix="sglang:",
    values={
        ss.KV_CACHE_USAGE: _s("sglang:token_usage", agg="mean"),
        ss.RUNNING: _s("sglang:num_running_reqs"),
        ss.WAITING: _s("sglang:num_queue_reqs"),
        # SGLang "retracts" a running request when memory runs out: its preemption.
        ss.PREEMPTIONS_TOTAL: _s("sglang:num_retracted_requests_total"),
        ss.PROMPT_TOKENS_TOTAL: _s("sglang:prompt_tokens_total"),
        ss.GENERATION_TOKENS_TOTAL: _s("sglang:generation_tokens_total"),
        ss.REQUESTS_FINISHED_TOTAL: _s("sglang:num_requests_total"),
        ss.REQUESTS_ABORTED_TOTAL: _s("sglang:num_aborted_requests_total"),
        ss.PREFIX_CACHE_HIT_RATE: _s("sglang:cache_hit_rate", agg="mean"),
    },
    histograms={
        ss.TTFT_SECONDS: _s("sglang:time_to_first_token_seconds"),
        ss.ITL_SECONDS: _s(
            "sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"
        ),
        ss.E2E_SECONDS: _s("sglang:e2e_request_latency_seconds"),
        ss.QUEUE_SECONDS: _s("sglang:queue_time_seconds"),
    },
)

# 2024 releases: label name= instead of model_name=, other gauge names, hit rate in percent.
SGLANG_2024 = EngineMap(
    engine="sglang",
    version="2024",
    prefix="sglang:",
    markers=("sglang:num_requests_running",),
    absent=("sglang:num_running_reqs",),
    values={
        ss.KV_CACHE_USAGE: _s("sglang:token_usage", agg="mean"),
        ss.RUNNING: _s("sglang:num_requests_running"),
        ss.WAITING: _s("sglang:num_requests_waiting", "sglang:queue_req"),
        ss.PROMPT_TOKENS_TOTAL: _s("sglang:prompt_tokens_total"),
        ss.GENERATION_TOKENS_TOTAL: _s("sglang:generation_tokens_total"),
        ss.PREFIX_CACHE_HIT_RATE: (Source("sglang:cache_hit_rate", agg="mean", scale=0.01),),
    },
    histograms={
        ss.TTFT_SECONDS: _s("sglang:time_to_first_token_seconds"),
        ss.ITL_SECONDS: _s("sglang:time_per_output_token_seconds"),
        ss.E2E_SECONDS: _s("sglang:e2e_request_latency_seconds"),
        ss.QUEUE_SECONDS: _s("sglang:waiting_request_latency_seconds"),
    },
)

TGI = EngineMap(
    engine="tgi",
    version="",
    prefix="tgi_",
    values={
        ss.RUNNING: _s("tgi_batch_current_size"),
        ss.WAITING: _s("tgi_queue_size"),
        # TGI has no token counters, but its per-request length histograms' sums are exactly
        # cumulative token totals.
        ss.PROMPT_TOKENS_TOTAL: _s("tgi_request_input_length_sum"),
        ss.GENERATION_TOKENS_TOTAL: _s("tgi_request_generated_tokens_sum"),
        ss.REQUESTS_FINISHED_TOTAL: _s("tgi_request_success"),
    },
    histograms={
        ss.TPOT_SECONDS: _s("tgi_request_mean_time_per_token_duration"),
        ss.E2E_SECONDS: _s("tgi_request_duration"),
        ss.QUEUE_SECONDS: _s("tgi_request_queue_duration"),
    },
)

_LLAMACPP_VALUES: dict[str, tuple[Source, ...]] = {
    ss.KV_CACHE_USAGE: _s("llamacpp:kv_cache_usage_ratio", agg="mean"),
    ss.RUNNING: _s("llamacpp:requests_processing"),
    ss.WAITING: _s("llamacpp:requests_deferred"),
    ss.PROMPT_TOKENS_TOTAL: _s("llamacpp:prompt_tokens_total"),
    ss.GENERATION_TOKENS_TOTAL: _s("llamacpp:tokens_predicted_total"),
}

LLAMACPP_OLD = EngineMap(
    engine="llamacpp",
    version="older builds (with KV gauge)",
    prefix="llamacpp:",
    markers=("llamacpp:kv_cache_usage_ratio",),
    values=_LLAMACPP_VALUES,
)

# Recent builds still get asked for the KV gauge, so that its absence is reported.
LLAMACPP_NEW = EngineMap(
    engine="llamacpp",
    version="recent builds (no KV gauge)",
    prefix="llamacpp:",
    values=_LLAMACPP_VALUES,
)

# vLLM's CacheConfig as an info gauge (value 1, the configuration in its labels: num_gpu_blocks,
# block_size, gpu_memory_utilization, cache_dtype, …; one series per DP engine), exposed by V0
# and V1 alike. Static for a server's life: read once, into the summary (server_summary.py).
VLLM_CACHE_CONFIG_INFO = "vllm:cache_config_info"

# GPU figures from an NVIDIA DCGM exporter (a separate URL): utilisation in percent,
# framebuffer in MiB, one series per GPU.
DCGM_UTIL = "DCGM_FI_DEV_GPU_UTIL"
DCGM_FB_USED = "DCGM_FI_DEV_FB_USED"
DCGM_FB_FREE = "DCGM_FI_DEV_FB_FREE"

# Order matters: within an engine, the more specific version first.
ENGINE_MAPS: tuple[EngineMap, ...] = (
    VLLM_V1,
    VLLM_V0,
    VLLM_V1_EARLY,
    VLLM_ANY,
    SGLANG_2024,
    SGLANG,
    TGI,
    LLAMACPP_OLD,
    LLAMACPP_NEW,
)


def all_base_names(maps: Iterable[EngineMap] = ENGINE_MAPS) -> set[str]:
    out: set[str] = set()
    for m in maps:
        out |= m.base_names()
    return out


def detect(names: Collection[str], maps: Iterable[EngineMap] = ENGINE_MAPS) -> EngineMap | None:
    """The map of the engine (and version) whose names ``names`` holds; None when none fits.

    When several engines' prefixes appear (a proxy merging pages), the one with the most
    names present wins.
    """
    maps = tuple(maps)
    present = set(names)
    best: EngineMap | None = None
    best_hits = 0
    seen_prefix: set[str] = set()
    for m in maps:
        if m.prefix in seen_prefix:
            continue
        if not all(n in present for n in m.markers) or any(n in present for n in m.absent):
            continue
        hits = sum(1 for n in present if n.startswith(m.prefix))
        if hits == 0:
            continue
        seen_prefix.add(m.prefix)
        if hits > best_hits:
            best, best_hits = m, hits
    return best
