"""The rules of the seed as data: one :class:`Rule` per bottleneck rule and troubleshooting
row, with the condition (over the figures of :mod:`servetune.diagnose.figures.client`), the verdict,
the evidence to quote and the actions in the seed's cost order.

The seed's lines, and the rule that implements each:

=========================================================  ===============================
"KV use long below 50% and low GPU use → not enough load"  ``under_loaded``
"near 100% with frequent preemptions → KV pool full"       ``kv_pool_full`` (+ ``kv_near_full``)
"high TTFT but low throughput → prefill blocked"           ``prefill_blocked``
table: throughput low, GPU idle → raise --max-num-seqs     ``batch_capped`` (+ ``under_loaded``)
table: P99 latency shoots up → past the comfortable load   ``overloaded`` (and the sweep's
                                                           ``past_knee``)
table: OOM → lower --gpu-memory-utilization/--max-model-len ``oom`` (run) and the config
                                                           doctor's ``will_not_start``
table: TTFT spikes → long prompts block                    ``prefill_blocked`` (chunked
                                                           prefill off), ``prefill_chunks_stall``
                                                           and ``short_prompts_wait`` (on)
(a P99 TPOT or ITL ≥ 5× its median is never healthy)       ``latency_tail`` (evaluate.py: the
                                                           cause named, or said unknown)
table: quality drops after quantization                    ``quantized_quality``
cost order: quantize → 80%+ use → rate-limit → add GPUs    the order of every action list
=========================================================  ===============================

Thresholds are named constants so the documentation and the tests quote the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from servetune.diagnose.conditions import AllOf, AnyOf, Cond, Condition
from servetune.metrics.timeline import STALL_MIN_MS, TAIL_RATIO

# Thresholds (shares are of the measured window).
LONG_SHARE = 0.8
""""Long below 50%": KV use < 50% for at least this share of the window."""
FULL_SHARE = 0.2
"""KV use > 90% for at least this share of the window counts as full."""
FULL_P95 = 0.95
FREQUENT_PREEMPTIONS = 0.01
"""At least one preemption per 100 completed requests is "frequent"."""
MIN_PREEMPTIONS = 3
"""…and at least this many: one preemption in a short run is not a pattern."""
LOW_GPU_UTIL = 0.5
LOW_COMPUTE = 0.2
"""Estimated compute load below 20% of the GPU's peak: the GPU has compute to spare."""
SPARE_COMPUTE = 0.35
"""Below 35% of peak (~60% of what prefill-bound vLLM reaches) a bigger batch still pays."""
NEAR_CEILING = 0.85
"""Compute is "near its ceiling" from 85% of what the engine reaches at best (the step
model's calibrated MFU for the GPU), not from a share of the datasheet peak."""
SMALL_BATCH = 0.25
CAP_SHARE = 0.5
WAITING_SHARE = 0.5
NO_QUEUE = 0.5
MIXED_PROMPTS = 4.0
TTFT_SPIKE = 5.0
STALL_MS = STALL_MIN_MS
"""(the stall thresholds are :mod:`servetune.metrics.timeline`'s; a stall ≥ 250 ms)"""
PREFILL_STALLS = 0.5
"""At least half the stalls came while another request was prefilled: prefills cause them."""
LONG_STALL_MS = 1000.0
SHORT_SPIKE = 8.0
"""Short prompts' TTFT should not depend on the long ones: P99 ≥ 8× the P50 is a spike."""
GROWTH_Z = 2.5
"""Past capacity: past the ramp-up, requests in flight rose by ≥ 2.5 standard deviations of
the arrivals' count noise (``inflight_growth_z``, :mod:`servetune.diagnose.growth`) and were
still rising in both of the last two quarters (``inflight_growth_late_share`` > 0: a step up
in traffic fills the engine once, within one quarter). docs/watch.md has the calibration:
over 30-s windows no stable server up to 88% of capacity is called past capacity for a minute
(the live hold), and a 1.27× overload is, from its first 90 s on."""
DEFICIT_Z = 3.0
"""…or it finished fewer requests than were sent over that half by ≥ 3 standard deviations."""
GROWTH = 0.1

FAILED_SHARE = 0.05

Kind = Literal["bottleneck", "warning", "advisory"]


@dataclass(frozen=True)
class Rule:
    id: str
    kind: Kind
    priority: int
    seed: str
    verdict: str
    """Template of the verdict sentence."""
    when: tuple[Condition, ...]
    """All must hold. A known false one: the rule does not fire. An unknown one: see
    ``Cond.if_missing``."""
    only_if: tuple[str, ...] = ()
    """Figures that must exist for the rule to apply at all (else it is silently skipped)."""
    unless: tuple[Condition, ...] = ()
    """If any of these is known true, the rule does not apply."""
    require_any: tuple[str, ...] = ()
    """At least one of these figures must be known, else the rule cannot tell."""
    evidence: tuple[str, ...] = ()
    actions: tuple[str, ...] = ()
    """Action ids (servetune.diagnose.actions.table.ACTIONS) in the seed's cost order."""
    cannot_tell: str = ""
    """Template for the cannot-tell sentence (what the known evidence says so far)."""
    fallback_actions: tuple[str, ...] = ()
    """Actions that find out, offered when the rule cannot tell (an experiment, not a fix)."""


OVERLOADED = AnyOf(
    (
        AllOf(
            (
                Cond("inflight_growth_z", ">=", GROWTH_Z, ""),
                Cond("inflight_growth_late_share", ">", 0, ""),
            )
        ),
        Cond("served_deficit_z", ">=", DEFICIT_Z, ""),
    ),
    "past the ramp-up, requests in flight rose {inflight_growth_z:num} σ over the arrivals' "
    "noise (rule: ≥ 2.5 σ) and were still rising at the end ({inflight_growth_late_share:pct} "
    "of the offered rate; rule: > 0), or the server finished clearly fewer than were sent "
    "({served_sent_ratio:pct}, {served_deficit_z:num} σ short; rule: ≥ 3 σ)",
)

# Shared by the two stall rules (whole prefills with chunked prefill off, chunks with it on).
STALLS_AT_PREFILL = Cond(
    "stalls_at_prefill",
    ">=",
    1,
    "{stalls_at_prefill:int} of {stalls:int} stalls ≥ {stall_limit_ms:ms} came while another "
    "request was prefilled",
)
STALLS_LINE_UP = Cond(
    "stalls_at_prefill_share",
    ">=",
    PREFILL_STALLS,
    "the stalls line up with prefills: {stalls_at_prefill_share:pct} of them (rule: ≥ 50%)",
)
BURST = Cond("burst", "==", 1, "")
"""A burst explains a stall by itself: the stall rules stand back."""

RULES: tuple[Rule, ...] = (
    Rule(
        id="client_behind",
        kind="warning",
        priority=120,
        seed="(measurement validity) a client that cannot hold its rate hides the server's "
        "behaviour",
        verdict="The load generator fell behind its schedule (requests left late, or fewer "
        "than planned): the server did not see the planned load, so every verdict below is "
        "about the load it saw",
        when=(Cond("client_behind", "==", 1, "the client reports it fell behind"),),
        evidence=(
            "client send lag P99 {send_lag_p99_ms:ms}",
            "planned {client_planned_rate:rate}, sent {client_achieved_rate:rate}",
        ),
        actions=("fix_client",),
    ),
    Rule(
        id="prefix_cache_inflated",
        kind="warning",
        priority=115,
        seed="(measurement validity) a load test measures the server only with prompts the "
        "server has not answered before",
        verdict="The server answered {prefix_cache_hit_rate:pct} of prompt tokens from its "
        "prefix cache, more than this run's own prompts allow ({prefix_hit_rate_ceiling:pct}): "
        "it measured the cache, not the server — TTFT and throughput look better than fresh "
        "traffic would get",
        when=(
            Cond(
                "prefix_cache_excess",
                ">",
                0,
                "the server's hit rate exceeds what the workload implies",
            ),
        ),
        only_if=("prefix_cache_hit_rate",),
        evidence=(
            "prefix-cache hit rate {prefix_cache_hit_rate:pct} over the measured window",
            "this run's prompts share {prefix_hit_rate_implied:pct} among themselves; with the "
            "chat template and tolerance at most {prefix_hit_rate_ceiling:pct} can hit",
        ),
        actions=("fresh_prompts",),
    ),
    Rule(
        id="oom",
        kind="warning",
        priority=110,
        seed="OOM → memory utilisation too high → lower --gpu-memory-utilization or "
        "--max-model-len",
        verdict="The engine ran out of memory during the run ({server_errors_oom:int} requests "
        "failed with an out-of-memory error): its memory budget is set too high",
        when=(Cond("server_errors_oom", ">=", 1, "requests failed with out-of-memory errors"),),
        evidence=("{server_errors_oom:int} requests failed with an out-of-memory error",),
        actions=(
            "lower_gpu_memory_utilization",
            "lower_max_model_len",
            "lower_max_num_batched_tokens",
        ),
    ),
    Rule(
        id="server_gone",
        kind="warning",
        priority=105,
        seed="OOM (an engine that dies under load stops answering)",
        verdict="The server stopped answering during the run ({server_gone:int} requests refused "
        "or cut): look in its log for an out-of-memory error or a crash",
        when=(
            Cond(
                "server_gone",
                ">=",
                1,
                "requests failed because the connection was refused or reset",
            ),
        ),
        evidence=(
            "{server_gone:int} requests failed with a refused or reset connection",
            "{failed_share:pct} of the requests failed",
        ),
        actions=("lower_gpu_memory_utilization",),
    ),
    Rule(
        id="failures",
        kind="warning",
        priority=100,
        seed="(measurement validity) latencies of a run with many failures describe only the "
        "successes",
        verdict="{failed_share:pct} of the requests failed: the latencies describe only the "
        "successes",
        when=(Cond("failed_share", ">=", FAILED_SHARE, "≥ 5% of the requests failed"),),
        unless=(
            Cond("server_errors_oom", ">=", 1, "OOM"),
            Cond("server_gone", ">=", 1, "server gone"),
        ),
        evidence=("{failed_share:pct} of the requests failed",),
    ),
    Rule(
        id="kv_pool_full",
        kind="bottleneck",
        priority=90,
        seed="KV-cache use near 100% with frequent preemptions → the KV pool is full: "
        "quantize, lower --max-model-len, or add GPUs",
        verdict="The KV pool is full: KV-cache use stayed above 90% for {kv_share_above_90:pct} "
        "of the window and requests were preempted {preemptions:int} times (recomputed from "
        "scratch)",
        when=(
            AnyOf(
                (
                    Cond("kv_share_above_90", ">=", FULL_SHARE, ""),
                    Cond("kv_p95", ">=", FULL_P95, ""),
                ),
                "KV-cache use > 90% for {kv_share_above_90:pct} of the window, P95 "
                "{kv_p95:pct} (rule: ≥ 20% of the window, or P95 ≥ 95%)",
                if_missing="note",
            ),
            Cond(
                "preemptions_per_request",
                ">=",
                FREQUENT_PREEMPTIONS,
                "{preemptions:int} preemptions = {preemptions_per_request:num} per completed "
                "request (rule: ≥ 0.01)",
                if_missing="note",
            ),
            Cond(
                "preemptions",
                ">=",
                MIN_PREEMPTIONS,
                "at least 3 preemptions in the window",
                if_missing="note",
            ),
        ),
        require_any=("kv_share_above_90", "kv_p95", "preemptions_per_request"),
        evidence=(
            "KV-cache use > 90% for {kv_share_above_90:pct} of the window ({kv_above_90:win}); "
            "mean {kv_mean:pct}, P95 {kv_p95:pct}",
            "{preemptions:int} preemptions ({preemptions_per_s:num}/s, "
            "{preemptions_per_request:num} per completed request)",
            "mean running {running_mean:num}, mean waiting {waiting_mean:num}",
            "the pool holds {kv_pool_tokens:tok} tokens ≈ {pool_requests:num} requests of the "
            "mean size ({tokens_per_request:tok} tokens)",
            "P99 E2E {e2e_p99_ms:ms}, P99 TTFT {ttft_p99_ms:ms}",
        ),
        actions=(
            "kv_cache_fp8",
            "quantize_weights",
            "raise_gpu_memory_utilization",
            "lower_max_model_len",
            "lower_max_num_seqs",
            "add_gpus",
        ),
        cannot_tell="Requests were preempted or the KV pool ran full, but not both can be seen",
    ),
    Rule(
        id="batch_capped",
        kind="bottleneck",
        priority=88,
        seed="throughput low, GPU idle → not enough concurrency / batch too small: raise "
        "--max-num-seqs",
        verdict="The batch is capped: running requests sat at the cap ({running_cap:int}) for "
        "{running_at_cap_share:pct} of the window while requests queued, with room left in "
        "the KV pool and compute to spare",
        when=(
            Cond(
                "running_at_cap_share",
                ">=",
                CAP_SHARE,
                "running at its cap ({running_cap_source}) for {running_at_cap_share:pct} of "
                "the window (rule: ≥ 50%)",
            ),
            Cond(
                "waiting_share",
                ">=",
                WAITING_SHARE,
                "requests waiting for {waiting_share:pct} of the window (rule: ≥ 50%)",
            ),
            Cond(
                "kv_p95",
                "<",
                0.8,
                "room in the KV pool: P95 KV use {kv_p95:pct} (rule: < 80%)",
                if_missing="note",
            ),
            Cond(
                "gpu_utilization_mean",
                "<",
                0.9,
                "GPU utilisation {gpu_utilization_mean:pct} (rule: < 90%)",
                if_missing="note",
            ),
            Cond(
                "compute_use_est",
                "<",
                SPARE_COMPUTE,
                "estimated compute load {compute_use_est:pct} of peak (rule: < 35%)",
                if_missing="note",
            ),
        ),
        require_any=("gpu_utilization_mean", "compute_use_est"),
        evidence=(
            "running at {running_cap:int} ({running_cap_source}) for "
            "{running_at_cap_share:pct} of the window ({running_at_cap:win})",
            "requests waiting for {waiting_share:pct} of the window, mean {waiting_mean:num}, "
            "max {waiting_max:int}",
            "KV-cache use mean {kv_mean:pct}, P95 {kv_p95:pct}: the pool holds ≈ "
            "{pool_requests:num} requests of the mean size",
            "estimated compute load {compute_use_est:pct} of {compute_peak}",
            "GPU utilisation {gpu_utilization_mean:pct}",
            "offered {offered_rate:rate}, served {request_throughput:rate}; P99 TTFT "
            "{ttft_p99_ms:ms}",
        ),
        actions=("raise_max_num_seqs",),
        cannot_tell="Running requests sit at their cap ({running_cap:int}) while others wait, "
        "with room in the KV pool; whether the GPU has compute to spare for a bigger batch",
        fallback_actions=("try_max_num_seqs",),
    ),
    Rule(
        id="prefill_blocked",
        kind="bottleneck",
        priority=86,
        seed="high TTFT but low throughput → prefill blocked by long requests: enable chunked "
        "prefill; TTFT spikes → long prompts block: chunked prefill, cap input length",
        verdict="Long prefills stall the running decodes: {stalls_at_prefill:int} of "
        "{stalls:int} stalls came in engine steps that prefilled a whole prompt (up to "
        "{stall_prompt_max:tok} tokens); {stalled_streams:int} streams waited, up to "
        "{stall_longest_ms:ms}, and P99 TPOT is {tpot_p99_ms:ms} against {tpot_p50_ms:ms} at P50",
        when=(
            STALLS_AT_PREFILL,
            STALLS_LINE_UP,
            Cond(
                "enable_chunked_prefill",
                "==",
                0,
                "chunked prefill is off",
                if_missing="note",
            ),
        ),
        unless=(OVERLOADED, BURST),
        evidence=(
            "the steps that stalled: {stall_examples}",
            "{stalls:int} stalls ≥ {stall_limit_ms:ms} (10× the P50 ITL {itl_p50_ms:ms}, at "
            "least 250 ms) at {stall_windows:win}; {stalled_streams:int} streams stalled",
            "P99 TPOT {tpot_p99_ms:ms} = {tpot_tail_ratio:x} the P50; P99 ITL {itl_p99_ms:ms} "
            "= {itl_tail_ratio:x} the P50 ({itl_p50_ms:ms}); longest gap {itl_max_ms:ms}",
            "prompts from {input_len_p50:tok} (median) to {input_len_max:tok} tokens; P99 TTFT "
            "{ttft_p99_ms:ms} vs P50 {ttft_p50_ms:ms}",
            "throughput {request_throughput:rate} of {offered_rate:rate} offered (not saturated)",
        ),
        actions=("enable_chunked_prefill", "cap_input_length"),
    ),
    Rule(
        id="prefill_chunks_stall",
        kind="bottleneck",
        priority=85,
        seed="TTFT spikes / decode stalls → long prompts block: in vLLM V1 (chunked prefill on) "
        "a smaller --max-num-batched-tokens or --long-prefill-token-threshold",
        verdict="Prefill chunks stall the running decodes: chunked prefill is on, but steps "
        "carrying up to {max_num_batched_tokens:tok} tokens of prefill held the streams back "
        "{stalls_at_prefill:int} times (up to {stall_longest_ms:ms}); P99 TPOT {tpot_p99_ms:ms} "
        "against {tpot_p50_ms:ms} at P50",
        when=(
            Cond("enable_chunked_prefill", "==", 1, "chunked prefill is on"),
            STALLS_AT_PREFILL,
            STALLS_LINE_UP,
            AnyOf(
                (
                    Cond("tpot_tail_ratio", ">=", TAIL_RATIO, ""),
                    Cond("stall_longest_ms", ">=", LONG_STALL_MS, ""),
                ),
                "the stalls reach the requests: P99 TPOT {tpot_tail_ratio:x} its median (rule: "
                "≥ 5×), or a stall of {stall_longest_ms:ms} (rule: ≥ 1 s)",
            ),
        ),
        only_if=("enable_chunked_prefill",),
        unless=(OVERLOADED, BURST),
        evidence=(
            "the steps that stalled: {stall_examples}",
            "{stalls:int} stalls ≥ {stall_limit_ms:ms} at {stall_windows:win}; "
            "{stalled_streams:int} streams stalled",
            "P99 TPOT {tpot_p99_ms:ms} = {tpot_tail_ratio:x} the P50; P99 ITL {itl_p99_ms:ms} "
            "= {itl_tail_ratio:x} the P50 ({itl_p50_ms:ms})",
            "step budget --max-num-batched-tokens {max_num_batched_tokens:tok}; per-prompt "
            "chunk cap --long-prefill-token-threshold {long_prefill_token_threshold:tok} "
            "(0 = none)",
        ),
        actions=("shrink_prefill_steps", "long_prefill_threshold", "cap_input_length"),
    ),
    Rule(
        id="short_prompts_wait",
        kind="bottleneck",
        priority=84,
        seed="TTFT spikes → long prompts block: chunked prefill, cap input length per request",
        verdict="Short prompts wait behind long ones: chunked prefill is on, but a "
        "{input_len_max:tok}-token prompt takes each step's budget until its prefill is done, "
        "so the shorter half of the prompts reaches {ttft_short_p99_ms:ms} P99 TTFT against "
        "{ttft_p50_ms:ms} at P50",
        when=(
            Cond(
                "input_spread",
                ">=",
                MIXED_PROMPTS,
                "long and short prompts mixed: longest {input_len_max:tok} vs median "
                "{input_len_p50:tok} tokens ({input_spread:x}; rule: ≥ 4×)",
            ),
            Cond("enable_chunked_prefill", "==", 1, "chunked prefill is on"),
            Cond(
                "ttft_short_spike_ratio",
                ">=",
                SHORT_SPIKE,
                "P99 TTFT of the short half {ttft_short_p99_ms:ms} vs P50 {ttft_p50_ms:ms} "
                "({ttft_short_spike_ratio:x}; rule: ≥ 8×)",
            ),
            Cond("ttft_short_p99_ms", ">=", STALL_MS, "≥ 250 ms"),
            Cond(
                "long_prefill_token_threshold",
                "==",
                0,
                "no per-prompt chunk cap (--long-prefill-token-threshold)",
                if_missing="note",
            ),
        ),
        only_if=("enable_chunked_prefill",),
        unless=(OVERLOADED,),
        evidence=(
            "prompts from {input_len_p50:tok} (median) to {input_len_max:tok} tokens",
            "P99 TTFT of the shorter half of the prompts {ttft_short_p99_ms:ms}; P50 TTFT "
            "{ttft_p50_ms:ms}; longest token gap {itl_max_ms:ms} (chunks keep streams moving)",
            "step budget --max-num-batched-tokens {max_num_batched_tokens:tok}",
        ),
        actions=("long_prefill_threshold", "cap_input_length"),
    ),
    Rule(
        id="overloaded",
        kind="bottleneck",
        priority=80,
        seed="P99 latency shoots up → past the comfortable concurrency → lower the "
        "concurrency cap or rate-limit",
        verdict="Past capacity: {offered_rate:rate} offered but the server completed only "
        "{request_throughput:rate}; requests in flight grow without bound "
        "({inflight_growth_per_s:per_s}) and P99 TTFT reaches {ttft_p99_ms:ms}",
        when=(
            OVERLOADED,
            Cond(
                "inflight_growth_per_s",
                ">",
                GROWTH,
                "requests in flight grew {inflight_growth_per_s:per_s} while sending "
                "(rule: > +0.1/s)",
            ),
        ),
        only_if=("offered_rate",),
        evidence=(
            "offered {offered_rate:rate}; past the ramp-up requests in flight grew "
            "{inflight_growth_late_per_s:per_s} ({inflight_growth_late_share:pct} of the "
            "offered rate), a rise of {inflight_growth_z:num} σ over the arrivals' noise",
            "finished / sent over the second half of the sending period {served_sent_ratio:pct}",
            "requests in flight while sending: mean {inflight_mean:num}, growing "
            "{inflight_growth_per_s:per_s} ({sending_window})",
            "waiting requests trend {waiting_slope_sending:per_s} while sending, max "
            "{waiting_max:int}",
            "P99 TTFT {ttft_p99_ms:ms}, P99 E2E {e2e_p99_ms:ms}",
            "estimated compute load {compute_use_est:pct} of {compute_peak}",
        ),
        actions=("quantize_weights_for_speed", "rate_limit", "add_gpus"),
    ),
    Rule(
        id="kv_near_full",
        kind="warning",
        priority=60,
        seed="KV-cache use near 100% (preemption ahead)",
        verdict="The KV pool is at its edge: KV-cache use above 90% for "
        "{kv_share_above_90:pct} of the window, no preemption yet — more load or longer "
        "requests will preempt",
        when=(
            Cond(
                "kv_share_above_90",
                ">=",
                FULL_SHARE,
                "KV-cache use > 90% for {kv_share_above_90:pct} of the window (rule: ≥ 20%)",
            ),
            Cond("preemptions", "==", 0, "no preemption"),
        ),
        # Where preemptions are not counted, kv_pool_full judges the full pool alone.
        only_if=("preemptions",),
        evidence=(
            "KV-cache use > 90% for {kv_share_above_90:pct} of the window ({kv_above_90:win})",
        ),
        actions=("kv_cache_fp8", "quantize_weights", "raise_gpu_memory_utilization"),
    ),
    Rule(
        id="under_loaded",
        kind="bottleneck",
        priority=50,
        seed="KV-cache use long below 50% and low GPU utilisation → not enough load: add "
        "traffic or raise the batch; throughput low, GPU idle → not enough concurrency",
        verdict="Not enough load: the KV pool stayed mostly empty (below 50% for "
        "{kv_share_below_50:pct} of the window, mean {kv_mean:pct}) and nothing queued — the "
        "server could take more",
        when=(
            Cond(
                "kv_share_below_50",
                ">=",
                LONG_SHARE,
                "KV-cache use < 50% for {kv_share_below_50:pct} of the window (rule: ≥ 80%)",
            ),
            Cond(
                "waiting_mean",
                "<",
                NO_QUEUE,
                "no queue: mean waiting {waiting_mean:num} (rule: < 0.5)",
                if_missing="note",
            ),
            Cond(
                "gpu_utilization_mean",
                "<",
                LOW_GPU_UTIL,
                "GPU utilisation {gpu_utilization_mean:pct} (rule: < 50%)",
                if_missing="note",
            ),
            Cond(
                "compute_use_est",
                "<",
                LOW_COMPUTE,
                "estimated compute load {compute_use_est:pct} of peak (rule: < 20%)",
                if_missing="note",
            ),
            Cond(
                "batch_fill",
                "<=",
                SMALL_BATCH,
                "small batch: mean running {running_mean:num} = {batch_fill:pct} of "
                "--max-num-seqs (rule: ≤ 25%)",
                if_missing="note",
            ),
        ),
        unless=(OVERLOADED,),
        require_any=("gpu_utilization_mean", "compute_use_est"),
        evidence=(
            "KV-cache use < 50% for {kv_share_below_50:pct} of the window; mean {kv_mean:pct}, "
            "max {kv_max:pct}",
            "mean running {running_mean:num} of {running_cap_source}; mean waiting "
            "{waiting_mean:num}",
            "GPU utilisation {gpu_utilization_mean:pct}",
            "estimated compute load {compute_use_est:pct} of {compute_peak}",
            "offered {offered_rate:rate}, served {request_throughput:rate}",
        ),
        actions=("add_load",),
        cannot_tell="The KV pool stayed mostly empty and nothing queued, so memory is not the "
        "limit; whether the GPU is idle",
        fallback_actions=("add_load",),
    ),
    Rule(
        id="quantized_quality",
        kind="advisory",
        priority=20,
        seed="quality drops after quantization → quantization error → better quantization or "
        "back to fp16",
        verdict="Quantized (weights {quantization} / KV {kv_cache_dtype}): a load test cannot "
        "see quality — check it before rollout",
        when=(
            AnyOf(
                (
                    Cond("quantized", "==", 1, ""),
                    Cond("kv_fp8", "==", 1, ""),
                ),
                "weights or KV cache quantized",
            ),
        ),
        only_if=("quantized",),
        actions=("quality_regression",),
    ),
    Rule(
        id="burst",
        kind="warning",
        priority=15,
        seed="(measurement validity) the seed sweeps fixed rates; a burst measures throughput",
        verdict="All requests were sent at once (rate inf): the latencies are queueing by "
        "construction — read the throughput ({request_throughput:rate}), not the latency",
        when=(Cond("burst", "==", 1, "request rate inf without a concurrency cap"),),
        evidence=("{completed:int} requests, throughput {request_throughput:rate}",),
    ),
)

RULES_BY_ID: dict[str, Rule] = {r.id: r for r in RULES}

CAUSES = (
    "kv_pool_full",
    "batch_capped",
    "prefill_blocked",
    "prefill_chunks_stall",
    "short_prompts_wait",
)
"""Rules that name what limits a saturated server (``overloaded`` cites the one that fired)."""
