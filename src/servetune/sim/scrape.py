"""A scrape of the simulated engine: what its ``/metrics`` would show, as a ServerSample.

The offline run scrapes every 0.5 s of virtual time (``server_metrics.jsonl``, the run's
server summary) the concepts a real scrape of vLLM V1 maps (:data:`NAMES_FOUND`).
"""

from __future__ import annotations

from typing import Any

from servetune.results import server_series as ss
from servetune.results.server_series import Histogram, ServerSample
from servetune.sim.construct import HIST_FIELDS, SAMPLE_FIELDS, construct_given
from servetune.sim.engine import Engine

# What a real scrape of the simulated server's /metrics would map to each concept.
NAMES_FOUND = {
    ss.KV_CACHE_USAGE: "vllm:kv_cache_usage_perc",
    ss.RUNNING: "vllm:num_requests_running",
    ss.WAITING: "vllm:num_requests_waiting",
    ss.PREEMPTIONS_TOTAL: "vllm:num_preemptions_total",
    ss.PROMPT_TOKENS_TOTAL: "vllm:prompt_tokens_total",
    ss.GENERATION_TOKENS_TOTAL: "vllm:generation_tokens_total",
    ss.REQUESTS_FINISHED_TOTAL: "vllm:request_success_total",
    ss.REQUESTS_ABORTED_TOTAL: 'vllm:request_success_total{finished_reason="abort"}',
    ss.PREFIX_CACHE_HITS_TOTAL: "vllm:prefix_cache_hits_total",
    ss.PREFIX_CACHE_QUERIES_TOTAL: "vllm:prefix_cache_queries_total",
    ss.TTFT_SECONDS: "vllm:time_to_first_token_seconds",
    ss.TPOT_SECONDS: "vllm:request_time_per_output_token_seconds",
    ss.ITL_SECONDS: "vllm:inter_token_latency_seconds",
    ss.E2E_SECONDS: "vllm:e2e_request_latency_seconds",
    ss.QUEUE_SECONDS: "vllm:request_queue_time_seconds",
    ss.PREFILL_SECONDS: "vllm:request_prefill_time_seconds",
    ss.DECODE_SECONDS: "vllm:request_decode_time_seconds",
}

SGLANG_NAMES_FOUND = {
    ss.KV_CACHE_USAGE: "sglang:token_usage",
    ss.RUNNING: "sglang:num_running_reqs",
    ss.WAITING: "sglang:num_queue_reqs",
    ss.PREEMPTIONS_TOTAL: "sglang:num_retracted_requests_total",
    ss.PROMPT_TOKENS_TOTAL: "sglang:prompt_tokens_total",
    ss.GENERATION_TOKENS_TOTAL: "sglang:generation_tokens_total",
    ss.REQUESTS_FINISHED_TOTAL: "sglang:num_requests_total",
    ss.REQUESTS_ABORTED_TOTAL: "sglang:num_aborted_requests_total",
    ss.TTFT_SECONDS: "sglang:time_to_first_token_seconds",
    ss.ITL_SECONDS: "sglang:inter_token_latency_seconds",
    ss.E2E_SECONDS: "sglang:e2e_request_latency_seconds",
    ss.QUEUE_SECONDS: "sglang:queue_time_seconds",
}
"""The same under SGLang's semantics (what :mod:`servetune.sim.exposition_sglang` serves)."""


def as_server_sample(
    sample: dict[str, Any], last: dict[str, tuple[dict[str, Any], Histogram]] | None = None
) -> ServerSample:
    """A :func:`server_sample` dict as the object a scraper keeps (no validation: it is ours).
    ``last``: the previous scrape's histograms by name; one whose snapshot did not change
    (the same dict) is the same object again."""
    hists = {}
    for k, h in sample["histograms"].items():
        prev = last.get(k) if last is not None else None
        if prev is None or prev[0] is not h:
            prev = (
                h,
                construct_given(
                    Histogram, {"sum": h["sum"], "count": h["count"], **h}, HIST_FIELDS
                ),
            )
            if last is not None:
                last[k] = prev
        hists[k] = prev[1]
    values = {"t": sample["t"], "values": sample["values"], "histograms": hists}
    return construct_given(ServerSample, values, SAMPLE_FIELDS)


def server_sample(eng: Engine, t: float, histograms: bool = True) -> dict[str, Any]:
    """One scrape of the engine's state, in the ServerSample form (``histograms``: with the
    latency histograms; without, the gauges and counters only)."""
    c = eng.counters
    pool = eng.pool
    values = {
        ss.KV_CACHE_USAGE: pool.usage,
        ss.RUNNING: float(eng.num_running),
        ss.WAITING: float(eng.num_waiting),
        ss.PREEMPTIONS_TOTAL: float(c.preemptions),
        ss.PROMPT_TOKENS_TOTAL: float(c.prompt_tokens),
        ss.GENERATION_TOKENS_TOTAL: float(c.generation_tokens),
        ss.REQUESTS_FINISHED_TOTAL: float(sum(c.finished.values())),
        ss.REQUESTS_ABORTED_TOTAL: float(c.finished.get("abort", 0)),
        # counters, as vLLM V1 exposes them: a window's hit rate is Δhits / Δqueries
        ss.PREFIX_CACHE_HITS_TOTAL: float(pool.hits),
        ss.PREFIX_CACHE_QUERIES_TOTAL: float(pool.queries),
    }
    if not histograms:
        return {"t": t, "values": values, "histograms": {}}
    return {
        "t": t,
        "values": values,
        "histograms": {
            ss.TTFT_SECONDS: eng.h_ttft.snapshot(),
            ss.TPOT_SECONDS: eng.h_tpot.snapshot(),
            ss.ITL_SECONDS: eng.h_itl.snapshot(),
            ss.E2E_SECONDS: eng.h_e2e.snapshot(),
            ss.QUEUE_SECONDS: eng.h_queue.snapshot(),
            ss.PREFILL_SECONDS: eng.h_prefill.snapshot(),
            ss.DECODE_SECONDS: eng.h_decode.snapshot(),
        },
    }
