"""TensorRT-LLM's OpenAI-compatible server (``trtllm-serve MODEL``).

Its command line (a click command): the model is the first argument; ``--host``, ``--port``,
``--backend``, ``--max_batch_size``, ``--max_num_tokens``, ``--max_seq_len``, ``--tp_size``
(``--tensor_parallel_size``), ``--pp_size``, ``--kv_cache_free_gpu_memory_fraction``
(``--free_gpu_memory_fraction``), ``--enable_chunked_prefill`` and ``--extra_llm_api_options``
(``--config`` in later releases): a YAML file of further LLM-API options, where the KV cache's
block reuse and data type live (``kv_cache_config.enable_block_reuse``,
``kv_cache_config.dtype``). Flags are spelled with ``_`` and only so. It serves the model
under the argument it was given.

Its metrics are at ``/prometheus/metrics``, named ``trtllm_…`` (``tensorrt_llm/metrics/
collector.py``): the per-request histograms and counters need the option
``return_perf_metrics``, the iteration gauges (running, waiting, KV use) the option
``enable_iter_perf_stats`` — so every launch's side file sets both. ``kv_cache_utilization``
is used ÷ max blocks (0–1).

Sources: the TensorRT-LLM docs' ``trtllm-serve`` reference (``commands/trtllm-serve``),
``tensorrt_llm/commands/serve.py``, ``examples/serve/prometheus_metrics.py`` and
``tensorrt_llm/metrics/collector.py`` (read 2026-12).
"""

from __future__ import annotations

from servetune.profiles import concepts as ss
from servetune.profiles.metric_map import EngineMap, Source, names
from servetune.profiles.model import EngineProfile, Entry, Launch, Metrics, failure

TRTLLM = EngineMap(
    engine="trtllm",
    name="trtllm",
    version="1.x (PyTorch backend)",
    prefix="trtllm_",
    values={
        ss.KV_CACHE_USAGE: names("trtllm_kv_cache_utilization", agg="mean"),
        ss.RUNNING: names("trtllm_num_requests_running"),
        ss.WAITING: names("trtllm_num_requests_waiting"),
        ss.PROMPT_TOKENS_TOTAL: names("trtllm_prompt_tokens_total"),
        ss.GENERATION_TOKENS_TOTAL: names("trtllm_generation_tokens_total"),
        ss.REQUESTS_FINISHED_TOTAL: names("trtllm_request_success_total"),
        ss.REQUESTS_ABORTED_TOTAL: (
            Source("trtllm_request_success_total", match=(("finished_reason", "abort"),)),
        ),
        ss.PREFIX_CACHE_HIT_RATE: names("trtllm_kv_cache_hit_rate", agg="mean"),
    },
    histograms={
        ss.TTFT_SECONDS: names("trtllm_time_to_first_token_seconds"),
        ss.TPOT_SECONDS: names("trtllm_time_per_output_token_seconds"),
        ss.E2E_SECONDS: names("trtllm_e2e_request_latency_seconds"),
        ss.QUEUE_SECONDS: names("trtllm_request_queue_time_seconds"),
        ss.PREFILL_SECONDS: names("trtllm_request_prefill_time_seconds"),
        ss.DECODE_SECONDS: names("trtllm_request_decode_time_seconds"),
    },
)

PROFILE = EngineProfile(
    id="trtllm",
    display_name="TensorRT-LLM",
    summary="TensorRT-LLM's server (`trtllm-serve MODEL`)",
    entry=Entry(
        command=("trtllm-serve",),
        model_flag=None,
        programs=("trtllm-serve",),
        subcommands=(("serve",), ()),
        flag_form="exact",
    ),
    launch=Launch(
        name_flag=None,
        served_name="given",
        side_file_flag="--extra_llm_api_options",
        side_file_always=(("return_perf_metrics", True), ("enable_iter_perf_stats", True)),
    ),
    metrics=Metrics(path="/prometheus/metrics", maps=(TRTLLM,)),
    failures=(
        failure(
            "kv_cache_too_small",
            r"(not enough (free )?memory for (the )?KV cache|attention window .* too large"
            r"|max_seq_len .* exceeds)",
            "lower max_model_len (--max_seq_len), or raise the KV share "
            "(--kv_cache_free_gpu_memory_fraction)",
        ),
        failure(
            "unknown_argument",
            r"(No such option: |Got unexpected extra argument)",
            "trtllm-serve does not accept a flag: check its version and the extra arguments",
        ),
    ),
    aliases=("tensorrt-llm", "trtllm-serve"),
    diagnose_flags=True,
)
