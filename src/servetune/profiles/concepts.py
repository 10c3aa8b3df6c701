"""The engine-neutral concepts a server's metrics are stored under (the rows of
docs/architecture.md's table), whatever the engine calls them: the names each profile's
metric map maps to; the result schemas (:mod:`servetune.results.server_series`) store them."""

from __future__ import annotations

# Gauges and counters (value as exposed; counters are cumulative).
KV_CACHE_USAGE = "kv_cache_usage"  # 0..1
RUNNING = "running"
WAITING = "waiting"
PREEMPTIONS_TOTAL = "preemptions_total"
PROMPT_TOKENS_TOTAL = "prompt_tokens_total"
GENERATION_TOKENS_TOTAL = "generation_tokens_total"
REQUESTS_FINISHED_TOTAL = "requests_finished_total"
REQUESTS_ABORTED_TOTAL = "requests_aborted_total"
PREFIX_CACHE_HIT_RATE = "prefix_cache_hit_rate"  # 0..1 when exposed
GPU_UTILIZATION = "gpu_utilization"  # 0..1
GPU_MEMORY_USED_BYTES = "gpu_memory_used_bytes"
GPU_MEMORY_TOTAL_BYTES = "gpu_memory_total_bytes"

# Histograms (seconds).
TTFT_SECONDS = "ttft_seconds"
TPOT_SECONDS = "tpot_seconds"
ITL_SECONDS = "itl_seconds"
E2E_SECONDS = "e2e_seconds"
QUEUE_SECONDS = "queue_seconds"

GAUGE_CONCEPTS = (
    KV_CACHE_USAGE,
    RUNNING,
    WAITING,
    PREEMPTIONS_TOTAL,
    PROMPT_TOKENS_TOTAL,
    GENERATION_TOKENS_TOTAL,
    REQUESTS_FINISHED_TOTAL,
    REQUESTS_ABORTED_TOTAL,
    PREFIX_CACHE_HIT_RATE,
    GPU_UTILIZATION,
    GPU_MEMORY_USED_BYTES,
    GPU_MEMORY_TOTAL_BYTES,
)
HISTOGRAM_CONCEPTS = (TTFT_SECONDS, TPOT_SECONDS, ITL_SECONDS, E2E_SECONDS, QUEUE_SECONDS)

# Added with the scraper (metrics/engine_maps.py). Prefix-cache counters: vLLM V1 exposes hits
# and queries (in tokens) rather than a rate; hit rate over a window = Δhits / Δqueries.
PREFIX_CACHE_HITS_TOTAL = "prefix_cache_hits_total"
PREFIX_CACHE_QUERIES_TOTAL = "prefix_cache_queries_total"
# Per-request time in the prefill and decode phases (vLLM), seconds.
PREFILL_SECONDS = "prefill_seconds"
DECODE_SECONDS = "decode_seconds"
