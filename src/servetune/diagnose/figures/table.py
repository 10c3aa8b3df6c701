"""The figures the rules read: each one's name, label and unit (:data:`FIGURES`), and
:class:`Figures`, the values of one run with the reasons for the missing ones.

Computed by :mod:`servetune.diagnose.figures.client` (client and records),
:mod:`servetune.diagnose.figures.server` (the server's series) and
:mod:`servetune.diagnose.figures.config` (the engine's knobs and what derives from them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from servetune.diagnose.knobs import KnownConfig


@dataclass(frozen=True)
class FigureDef:
    label: str
    unit: str
    """pct (0–1 shown as %), ms, s, req/s, tok/s, count, ratio (×), tokens, flag, per_s, GiB."""


FIGURES: dict[str, FigureDef] = {
    # client
    "completed": FigureDef("requests completed", "count"),
    "failed_share": FigureDef("failed requests", "pct"),
    "duration_s": FigureDef("measured window", "s"),
    "offered_rate": FigureDef("offered request rate", "req/s"),
    "burst": FigureDef("all requests sent at once (rate inf)", "flag"),
    "closed_loop": FigureDef("closed loop (fixed concurrency)", "flag"),
    "max_concurrency": FigureDef("client concurrency cap", "count"),
    "request_throughput": FigureDef("request throughput", "req/s"),
    "output_throughput": FigureDef("output throughput", "tok/s"),
    "total_token_throughput": FigureDef("total token throughput", "tok/s"),
    "ttft_p50_ms": FigureDef("P50 TTFT", "ms"),
    "ttft_p99_ms": FigureDef("P99 TTFT", "ms"),
    "ttft_max_ms": FigureDef("max TTFT", "ms"),
    "ttft_short_p99_ms": FigureDef("P99 TTFT of the shorter half of the prompts", "ms"),
    "ttft_short_spike_ratio": FigureDef(
        "P99 TTFT of the shorter half of the prompts / P50 TTFT", "ratio"
    ),
    "tpot_p50_ms": FigureDef("P50 TPOT", "ms"),
    "tpot_p99_ms": FigureDef("P99 TPOT", "ms"),
    "itl_p50_ms": FigureDef("P50 ITL", "ms"),
    "itl_p99_ms": FigureDef("P99 ITL", "ms"),
    "itl_max_ms": FigureDef("longest gap between two tokens of a stream", "ms"),
    "e2e_p99_ms": FigureDef("P99 E2E latency", "ms"),
    "ttft_spike_ratio": FigureDef("P99/P50 TTFT", "ratio"),
    "itl_stall_ratio": FigureDef("longest token gap / P50 ITL", "ratio"),
    "stalls": FigureDef(
        "engine stalls seen by the streams (token gaps ≥ 10× P50 ITL and ≥ 250 ms)", "count"
    ),
    "stall_limit_ms": FigureDef("shortest token gap counted as a stall", "ms"),
    "stall_longest_ms": FigureDef("longest stall", "ms"),
    "stalled_streams": FigureDef("requests whose stream stalled", "count"),
    "stalls_at_prefill": FigureDef("stalls in which another request was prefilled", "count"),
    "stalls_at_prefill_share": FigureDef(
        "share of the stalls in which another request was prefilled", "pct"
    ),
    "stall_prompt_max": FigureDef("longest prompt prefilled during a stall", "tokens"),
    "tpot_tail_ratio": FigureDef("P99 TPOT / P50 TPOT", "ratio"),
    "itl_tail_ratio": FigureDef("P99 ITL / P50 ITL", "ratio"),
    "itl_zero_share": FigureDef(
        "share of the chunk gaps that are 0 (chunks that arrived together, in one read)", "pct"
    ),
    "slow_gaps": FigureDef("token gaps ≥ 5× the P50 ITL (merged over streams)", "count"),
    "slow_gaps_at_prefill_share": FigureDef(
        "share of the slow token gaps in which another request was prefilled", "pct"
    ),
    "input_len_p50": FigureDef("median prompt length", "tokens"),
    "input_len_max": FigureDef("longest prompt", "tokens"),
    "input_spread": FigureDef("longest / median prompt", "ratio"),
    "output_len_mean": FigureDef("mean output length", "tokens"),
    "tokens_per_request": FigureDef("mean prompt + output tokens per request", "tokens"),
    "max_request_tokens": FigureDef("longest prompt + output", "tokens"),
    "client_behind": FigureDef("client fell behind its schedule", "flag"),
    "prefix_cache_hit_rate": FigureDef("prefix-cache hit rate (server)", "pct"),
    "prefix_hit_rate_implied": FigureDef("prompt share the workload's own prompts repeat", "pct"),
    "prefix_hit_rate_ceiling": FigureDef("highest hit rate the workload allows", "pct"),
    "prefix_cache_excess": FigureDef("hit rate above what the workload allows", "pct"),
    "send_lag_p99_ms": FigureDef("P99 client send lag", "ms"),
    "client_planned_rate": FigureDef("rate of the client's plan (its send times)", "req/s"),
    "client_achieved_rate": FigureDef("rate the client really sent at", "req/s"),
    "sending_s": FigureDef("sending period", "s"),
    "inflight_mean": FigureDef("mean requests in flight while sending", "count"),
    "inflight_growth_per_s": FigureDef("growth of requests in flight while sending", "per_s"),
    "served_sent_ratio": FigureDef(
        "requests finished / requests sent over the second half of the sending period", "ratio"
    ),
    "inflight_growth_share": FigureDef(
        "growth of requests in flight as a share of the offered rate", "pct"
    ),
    "inflight_growth_late_per_s": FigureDef(
        "growth of requests in flight past the ramp-up (the smaller slope of the last two "
        "quarters of the sending period or window)",
        "per_s",
    ),
    "inflight_growth_late_share": FigureDef(
        "growth of requests in flight past the ramp-up, as a share of the offered rate",
        "pct",
    ),
    "inflight_growth_z": FigureDef(
        "rise of requests in flight past the ramp-up (a run: the second half of the sending "
        "period; a window: all of it), in standard deviations of the arrivals' count "
        "noise",
        "num",
    ),
    "served_deficit_z": FigureDef(
        "shortfall of finished vs sent requests over the second half, in standard deviations",
        "num",
    ),
    "served_rate": FigureDef("rate the server kept up with while sending", "req/s"),
    "server_errors_oom": FigureDef("requests failed with an out-of-memory error", "count"),
    "server_gone": FigureDef("requests failed because the server stopped answering", "count"),
    # server
    "server_samples": FigureDef("server samples in the window", "count"),
    "kv_mean": FigureDef("mean KV-cache use", "pct"),
    "kv_p95": FigureDef("P95 KV-cache use", "pct"),
    "kv_max": FigureDef("max KV-cache use", "pct"),
    "kv_share_below_50": FigureDef("share of the window with KV-cache use < 50%", "pct"),
    "kv_share_above_90": FigureDef("share of the window with KV-cache use > 90%", "pct"),
    "running_mean": FigureDef("mean running requests", "count"),
    "running_max": FigureDef("max running requests", "count"),
    "running_at_cap_share": FigureDef("share of the window with running at its cap", "pct"),
    "waiting_mean": FigureDef("mean waiting requests", "count"),
    "waiting_max": FigureDef("max waiting requests", "count"),
    "waiting_share": FigureDef("share of the window with requests waiting", "pct"),
    "waiting_slope_sending": FigureDef("trend of waiting requests while sending", "per_s"),
    "preemptions": FigureDef("preemptions in the window", "count"),
    "preemptions_per_s": FigureDef("preemptions per second", "per_s"),
    "preemptions_per_request": FigureDef("preemptions per completed request", "ratio"),
    "gpu_utilization_mean": FigureDef("mean GPU utilisation", "pct"),
    "queue_p99_ms": FigureDef("P99 time in the engine's queue (server histogram)", "ms"),
    # knobs and derived
    "max_num_seqs": FigureDef("--max-num-seqs", "count"),
    "max_num_batched_tokens": FigureDef("--max-num-batched-tokens", "tokens"),
    "max_model_len": FigureDef("--max-model-len", "tokens"),
    "gpu_memory_utilization": FigureDef("--gpu-memory-utilization", "num"),
    "enable_chunked_prefill": FigureDef("chunked prefill on", "flag"),
    "quantized": FigureDef("weights quantized", "flag"),
    "kv_fp8": FigureDef("KV cache in fp8", "flag"),
    "tensor_parallel_size": FigureDef("--tensor-parallel-size", "count"),
    "long_prefill_token_threshold": FigureDef("--long-prefill-token-threshold", "tokens"),
    "kv_pool_tokens": FigureDef("KV pool size", "tokens"),
    "pool_requests": FigureDef("requests of the mean size the KV pool holds", "count"),
    "batch_fill": FigureDef("mean running / --max-num-seqs", "pct"),
    "running_cap": FigureDef("the running cap", "count"),
    "compute_use_est": FigureDef(
        "estimated compute load (model FLOPs per token × tokens/s ÷ the GPU's peak)", "pct"
    ),
    "compute_ceiling": FigureDef(
        "share of the peak the engine reaches at best (the step model's calibrated MFU)", "pct"
    ),
    "compute_of_ceiling": FigureDef("estimated compute load / what the engine reaches", "pct"),
    "server_prompt_tokens_per_s": FigureDef("prompt tokens per second (server)", "tok/s"),
    "server_generation_tokens_per_s": FigureDef("generated tokens per second (server)", "tok/s"),
    # the config doctor
    "workload_input_len": FigureDef("workload prompt length (mean)", "tokens"),
    "workload_output_len": FigureDef("workload output length (mean)", "tokens"),
    "workload_input_max": FigureDef("workload's longest prompt", "tokens"),
    "workload_request_max": FigureDef("workload's longest prompt + output", "tokens"),
    "pool_per_seq": FigureDef("average requests the pool holds per --max-num-seqs", "ratio"),
    "kv_use_at_cap": FigureDef("KV use with --max-num-seqs average requests", "pct"),
    "mml_over_workload": FigureDef("--max-model-len / longest request", "ratio"),
    "mml_pool_gain": FigureDef("KV pool gained by lowering --max-model-len", "pct"),
    "mml_pool_share": FigureDef("share of the pool one max-model-len request can hold", "pct"),
    "prefill_stall_ms": FigureDef("one step running the longest prompt whole", "ms"),
    "mnbt_over_prompt": FigureDef("--max-num-batched-tokens / longest prompt", "ratio"),
    "max_concurrency_at_mml": FigureDef("vLLM's maximum concurrency at max-model-len", "ratio"),
}


@dataclass
class Figures:
    """Named values of one run, the reasons for the missing ones, and time windows."""

    values: dict[str, float] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    windows: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    """Stretches (start, end) in run seconds where a gauge was past a threshold."""
    texts: dict[str, str] = field(default_factory=dict)
    """Words that go with some figures (e.g. where the running cap came from)."""
    config: KnownConfig = field(default_factory=KnownConfig)
    label: str | None = None
    sending: tuple[float, float] | None = None
    """First and last send, run seconds."""

    def get(self, name: str) -> float | None:
        return self.values.get(name)

    def has(self, name: str) -> bool:
        return name in self.values

    def put(self, name: str, value: float | int | bool | None, why_missing: str = "") -> None:
        if value is None or (isinstance(value, float) and not math.isfinite(value)):
            if why_missing and name not in self.values:
                self.missing.setdefault(name, why_missing)
            return
        self.values[name] = float(value)
        self.missing.pop(name, None)

    def miss(self, name: str, why: str) -> None:
        if name not in self.values:
            self.missing.setdefault(name, why)
