"""SGLang (``python -m sglang.launch_server``).

Sources: ``docs/advanced_features/server_arguments.md`` (``--model-path``, ``--host``,
``--port``, ``--served-model-name``, ``--enable-metrics``: no ``/metrics`` without it); metric
names: ``python/sglang/srt/metrics/collector.py`` and docs/references/production_metrics.md
(its 2024 example: ``name=`` label, ``num_requests_running``, ``cache_hit_rate`` in percent,
``waiting_request_latency_seconds``).
"""

from __future__ import annotations

from servetune.profiles import concepts as ss
from servetune.profiles.metric_map import EngineMap, Source, names
from servetune.profiles.model import EngineProfile, Entry, Launch, Metrics

SGLANG = EngineMap(
    engine="sglang",
    name="sglang",
    version="2025+",
    prefix="sglang:",
    values={
        ss.KV_CACHE_USAGE: names("sglang:token_usage", agg="mean"),
        ss.RUNNING: names("sglang:num_running_reqs"),
        ss.WAITING: names("sglang:num_queue_reqs"),
        # SGLang "retracts" a running request when memory runs out: its preemption.
        ss.PREEMPTIONS_TOTAL: names("sglang:num_retracted_requests_total"),
        ss.PROMPT_TOKENS_TOTAL: names("sglang:prompt_tokens_total"),
        ss.GENERATION_TOKENS_TOTAL: names("sglang:generation_tokens_total"),
        ss.REQUESTS_FINISHED_TOTAL: names("sglang:num_requests_total"),
        ss.REQUESTS_ABORTED_TOTAL: names("sglang:num_aborted_requests_total"),
        ss.PREFIX_CACHE_HIT_RATE: names("sglang:cache_hit_rate", agg="mean"),
    },
    histograms={
        ss.TTFT_SECONDS: names("sglang:time_to_first_token_seconds"),
        ss.ITL_SECONDS: names(
            "sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"
        ),
        ss.E2E_SECONDS: names("sglang:e2e_request_latency_seconds"),
        ss.QUEUE_SECONDS: names("sglang:queue_time_seconds"),
    },
)

# 2024 releases: label name= instead of model_name=, other gauge names, hit rate in percent.
SGLANG_2024 = EngineMap(
    engine="sglang",
    name="sglang-2024",
    version="2024",
    prefix="sglang:",
    markers=("sglang:num_requests_running",),
    absent=("sglang:num_running_reqs",),
    values={
        ss.KV_CACHE_USAGE: names("sglang:token_usage", agg="mean"),
        ss.RUNNING: names("sglang:num_requests_running"),
        ss.WAITING: names("sglang:num_requests_waiting", "sglang:queue_req"),
        ss.PROMPT_TOKENS_TOTAL: names("sglang:prompt_tokens_total"),
        ss.GENERATION_TOKENS_TOTAL: names("sglang:generation_tokens_total"),
        ss.PREFIX_CACHE_HIT_RATE: (Source("sglang:cache_hit_rate", agg="mean", scale=0.01),),
    },
    histograms={
        ss.TTFT_SECONDS: names("sglang:time_to_first_token_seconds"),
        ss.ITL_SECONDS: names("sglang:time_per_output_token_seconds"),
        ss.E2E_SECONDS: names("sglang:e2e_request_latency_seconds"),
        ss.QUEUE_SECONDS: names("sglang:waiting_request_latency_seconds"),
    },
)


PROFILE = EngineProfile(
    id="sglang",
    display_name="SGLang",
    summary="SGLang (`python -m sglang.launch_server --model-path MODEL`)",
    entry=Entry(
        command=("python", "-m", "sglang.launch_server"),
        model_flag="--model-path",
        programs=("sglang",),
        subcommands=(("serve",),),
        modules=("sglang.launch_server",),
    ),
    launch=Launch(executable=("python3",), always=("--enable-metrics",)),
    metrics=Metrics(maps=(SGLANG_2024, SGLANG)),
    sim_semantics="sglang-srt",
    knob_rules=("sglang_chunk",),
    sim_screens=frozenset({"memory"}),
    diagnose_flags=True,
)
