"""vLLM (``vllm serve``, GPU) — and the maps of its metric names, which its CPU build and the
simulated engine expose too.

Sources: ``vllm/entrypoints/openai/cli_args.py`` (host, port, ``--served-model-name``; a local
model is served under the path as given unless named); metric names: ``vllm/v1/metrics/loggers.py``
(PrometheusStatLogger, V1 ≥ 0.10; labels ``model_name``, ``engine``;
``request_success_total{finished_reason=stop|length|abort}``), a v0.10.2 capture, and the
vLLM CPU 0.32 build of docs/real-engines.md (``inter_token_latency_seconds``,
``request_time_per_output_token_seconds``); 0.8–0.9: ``vllm/engine/metrics.py`` (V0 engine:
``gpu_cache_usage_perc``, ``num_requests_swapped``, ``gpu_prefix_cache_hit_rate``) and the
early V1 logger (``gpu_prefix_cache_{hits,queries}_total``); both have
``time_per_output_token_seconds``, a histogram of per-iteration token gaps — our ITL, not a
per-request TPOT.
"""

from __future__ import annotations

from servetune.profiles import concepts as ss
from servetune.profiles.metric_map import EngineMap, Source, names
from servetune.profiles.model import EngineProfile, Entry, Launch, Metrics

_ABORT = (("finished_reason", "abort"),)

VLLM_V1 = EngineMap(
    engine="vllm",
    name="vllm",
    version="V1 (>=0.10)",
    prefix="vllm:",
    markers=("vllm:kv_cache_usage_perc",),
    values={
        ss.KV_CACHE_USAGE: names(
            "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", agg="mean"
        ),
        ss.RUNNING: names("vllm:num_requests_running"),
        ss.WAITING: names("vllm:num_requests_waiting"),
        ss.PREEMPTIONS_TOTAL: names("vllm:num_preemptions_total"),
        ss.PROMPT_TOKENS_TOTAL: names("vllm:prompt_tokens_total"),
        ss.GENERATION_TOKENS_TOTAL: names("vllm:generation_tokens_total"),
        ss.REQUESTS_FINISHED_TOTAL: names("vllm:request_success_total"),
        ss.REQUESTS_ABORTED_TOTAL: (Source("vllm:request_success_total", match=_ABORT),),
        ss.PREFIX_CACHE_HITS_TOTAL: names(
            "vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"
        ),
        ss.PREFIX_CACHE_QUERIES_TOTAL: names(
            "vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"
        ),
    },
    histograms={
        ss.TTFT_SECONDS: names("vllm:time_to_first_token_seconds"),
        ss.TPOT_SECONDS: names("vllm:request_time_per_output_token_seconds"),
        ss.ITL_SECONDS: names(
            "vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"
        ),
        ss.E2E_SECONDS: names("vllm:e2e_request_latency_seconds"),
        ss.QUEUE_SECONDS: names("vllm:request_queue_time_seconds"),
        ss.PREFILL_SECONDS: names("vllm:request_prefill_time_seconds"),
        ss.DECODE_SECONDS: names("vllm:request_decode_time_seconds"),
    },
)

_VLLM_08_VALUES: dict[str, tuple[Source, ...]] = {
    ss.KV_CACHE_USAGE: names("vllm:gpu_cache_usage_perc", agg="mean"),
    ss.RUNNING: names("vllm:num_requests_running"),
    ss.WAITING: names("vllm:num_requests_waiting"),
    ss.PREEMPTIONS_TOTAL: names("vllm:num_preemptions_total"),
    ss.PROMPT_TOKENS_TOTAL: names("vllm:prompt_tokens_total"),
    ss.GENERATION_TOKENS_TOTAL: names("vllm:generation_tokens_total"),
    ss.REQUESTS_FINISHED_TOTAL: names("vllm:request_success_total"),
    ss.REQUESTS_ABORTED_TOTAL: (Source("vllm:request_success_total", match=_ABORT),),
}
_VLLM_08_HISTOGRAMS: dict[str, tuple[Source, ...]] = {
    ss.TTFT_SECONDS: names("vllm:time_to_first_token_seconds"),
    ss.ITL_SECONDS: names("vllm:time_per_output_token_seconds"),
    ss.E2E_SECONDS: names("vllm:e2e_request_latency_seconds"),
    ss.QUEUE_SECONDS: names("vllm:request_queue_time_seconds"),
    ss.PREFILL_SECONDS: names("vllm:request_prefill_time_seconds"),
    ss.DECODE_SECONDS: names("vllm:request_decode_time_seconds"),
}

# 0.8-0.9 running the old V0 engine (VLLM_USE_V1=0): swap space, a prefix hit-rate gauge.
VLLM_V0 = EngineMap(
    engine="vllm",
    name="vllm-0.8-v0",
    version="0.8-0.9 (V0 engine)",
    prefix="vllm:",
    markers=("vllm:gpu_cache_usage_perc", "vllm:num_requests_swapped"),
    absent=("vllm:kv_cache_usage_perc",),
    values={
        **_VLLM_08_VALUES,
        ss.PREFIX_CACHE_HIT_RATE: names("vllm:gpu_prefix_cache_hit_rate", agg="mean"),
    },
    histograms=_VLLM_08_HISTOGRAMS,
)

# 0.8-0.9 on the V1 engine (the default from 0.8): prefix-cache counters, no swap.
VLLM_V1_EARLY = EngineMap(
    engine="vllm",
    name="vllm-0.8-v1",
    version="0.8-0.9 (V1 engine)",
    prefix="vllm:",
    markers=("vllm:gpu_cache_usage_perc",),
    absent=("vllm:kv_cache_usage_perc",),
    values={
        **_VLLM_08_VALUES,
        ss.PREFIX_CACHE_HITS_TOTAL: names("vllm:gpu_prefix_cache_hits_total"),
        ss.PREFIX_CACHE_QUERIES_TOTAL: names("vllm:gpu_prefix_cache_queries_total"),
    },
    histograms=_VLLM_08_HISTOGRAMS,
)

# A vLLM page with neither KV gauge (a partial exporter, a proxy): read what is there.
VLLM_ANY = EngineMap(
    engine="vllm",
    name="",
    version="unknown version",
    prefix="vllm:",
    values=VLLM_V1.values,
    histograms=VLLM_V1.histograms,
)


VLLM_MAPS = (VLLM_V1, VLLM_V0, VLLM_V1_EARLY, VLLM_ANY)

PROFILE = EngineProfile(
    id="vllm",
    display_name="vLLM",
    summary="vLLM on a GPU (`vllm serve MODEL`)",
    entry=Entry(
        command=("vllm", "serve"),
        model_flag=None,
        programs=("vllm",),
        subcommands=(("serve",),),
        modules=("vllm.entrypoints",),
    ),
    launch=Launch(),
    metrics=Metrics(maps=VLLM_MAPS),
    sim_semantics="vllm-v1",
    knob_rules=("vllm_batch",),
    sim_screens=frozenset({"memory", "vllm_defaults"}),
    memory_model=True,
    diagnose_flags=True,
)
