"""Actions as data: what to change, by how much, what to expect and what it risks — ordered by
the seed's cost order (1 quantize → 2 push GPU/KV use to 80%+ → 3 rate-limit at the knee →
4 only then add GPUs).

Each :class:`ActionSpec` names an engine-neutral knob (``servetune.engines.knobs``) or is an
operational step (a gateway cap, more load). Its new value comes from a *target* function
over the run's figures (:mod:`servetune.diagnose.actions.targets`); an action for one run is
built by :mod:`servetune.diagnose.actions.build`, each engine's spelling of it by
:mod:`servetune.diagnose.engine_flags`. The seed's rules for any change are in
:data:`PROCEDURE`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from servetune.diagnose.actions.targets import (
    Target,
    chunk_budget,
    chunked_on,
    double_seqs,
    kv_fp8,
    long_prefill_cap,
    max_model_len_down,
    mnbt_down,
    no_known_move,
    raise_mml,
    seqs_to_pool,
    served_rate,
    smaller_steps,
    tp_up,
    util_down,
    util_up,
    weights,
    weights_for_speed,
)
from servetune.diagnose.figures.table import Figures
from servetune.knobs import KnobValue

PROCEDURE = [
    "Change one knob at a time, on the same model and the same traffic; record the old value.",
    "Re-run the same load (servetune bench or servetune sweep with the same flags and no "
    "--seed, so that the server sees fresh prompts) and compare it with the old run: "
    "servetune compare OLD_DIR NEW_DIR gives P50/P99 TTFT, TPOT, throughput, KV and GPU use "
    "with 95% intervals and says which differences beat the run-to-run noise.",
    "Roll out through a canary: 5–10% of traffic through the gateway to the new config, roll "
    "back on anomalies, never at peak hours.",
    "After any quantization, run a quality regression (accuracy / perplexity / your own "
    "samples) before rollout.",
]


@dataclass(frozen=True)
class ActionSpec:
    id: str
    title: str
    """Template; ``{old}`` and ``{new}`` are the knob's values, ``{flag}`` its vLLM flag."""
    expected: str
    risk: str
    cost_step: int = 0
    knob: str | None = None
    target: Target | None = None
    verify: str = ""
    also: Callable[[Figures], dict[str, KnobValue]] | None = None
    """Knobs that change together with ``knob`` (one logical change)."""


# --- the table ----------------------------------------------------------------------------

QUALITY = (
    "quality can drop: run a quality regression (accuracy / perplexity / your own samples) "
    "before rollout; if it drops, use a better quantization or go back to bf16"
)

ACTIONS: dict[str, ActionSpec] = {
    a.id: a
    for a in (
        ActionSpec(
            id="kv_cache_fp8",
            knob="kv_cache_dtype",
            target=kv_fp8,
            cost_step=1,
            title="quantize the KV cache: {flag} fp8",
            expected="the KV pool holds about twice the tokens ({pool_change}): fewer "
            "preemptions, more requests at once",
            risk="fp8 KV adds quantization error (uncalibrated scales default to 1.0): " + QUALITY,
            verify="preemptions per second and P99 E2E on the same load",
        ),
        ActionSpec(
            id="quantize_weights",
            knob="quantization",
            target=weights,
            cost_step=1,
            title="quantize the weights: {flag} {new}",
            expected="{quant_effect}; the KV pool gets the memory freed ({pool_change})",
            risk="AWQ/GPTQ need a pre-quantized checkpoint; fp8 on GPUs without fp8 tensor "
            "cores is weight-only; " + QUALITY,
            verify="KV pool size at start-up, then throughput and quality",
        ),
        ActionSpec(
            id="quantize_weights_for_speed",
            knob="quantization",
            target=weights_for_speed,
            cost_step=1,
            title="quantize the weights: {flag} {new}",
            expected="{quant_effect}",
            risk="AWQ/GPTQ need a pre-quantized checkpoint; " + QUALITY,
            verify="the saturation throughput of a sweep",
        ),
        ActionSpec(
            id="raise_gpu_memory_utilization",
            knob="gpu_memory_utilization",
            target=util_up,
            cost_step=2,
            title="raise {flag} {old} → {new}",
            expected="a bigger KV pool ({pool_change})",
            risk="less headroom outside the budget for CUDA graphs, NCCL buffers and other "
            "processes: out of memory at start or under load (the seed's OOM row); canary "
            "first",
            verify="the engine starts; preemptions and KV use under the same load",
        ),
        ActionSpec(
            id="raise_max_num_seqs",
            knob="max_num_seqs",
            target=double_seqs,
            cost_step=2,
            title="raise {flag} {old} → {new}",
            expected="up to {new} requests run at once instead of queueing; while decode is "
            "memory-bound, throughput rises almost in proportion and KV use climbs toward "
            "80%",
            risk="each step carries more requests, so TPOT and the P99 tail rise; the "
            "sampler's logits buffer grows with it (OOM at start is possible); past what the "
            "pool holds it turns into preemptions — change it alone, canary first",
            verify="request throughput and P99 TPOT at the same offered load",
        ),
        ActionSpec(
            id="try_max_num_seqs",
            knob="max_num_seqs",
            target=double_seqs,
            cost_step=2,
            title="find out: raise {flag} {old} → {new} on a canary and re-run the same load",
            expected="if throughput rises and TPOT stays acceptable, the GPU had room and the "
            "cap was the bottleneck; if throughput stays flat, compute is the limit — put it "
            "back",
            risk="TPOT and the tail rise with the batch; OOM at start is possible; record the "
            "old value",
            verify="request throughput at the same offered load (or measure GPU utilisation: "
            "--dcgm-url)",
        ),
        ActionSpec(
            id="lower_max_num_seqs",
            knob="max_num_seqs",
            target=seqs_to_pool,
            cost_step=0,
            title="lower {flag} {old} → {new} (what the KV pool holds at the mean request size)",
            expected="requests wait in the queue instead of being preempted and recomputed; "
            "no work thrown away",
            risk="a lower cap lowers peak throughput when requests are short; queueing moves "
            "to TTFT",
            verify="preemptions per second (should reach 0) and P99 E2E",
        ),
        ActionSpec(
            id="lower_max_model_len",
            knob="max_model_len",
            target=max_model_len_down,
            title="lower {flag} {old} → {new} (the longest request × 1.25)",
            expected="bounds the blocks one request can hold; in vLLM V1 it enlarges the pool "
            "only through a smaller activation peak ({pool_change})",
            risk="prompts + outputs longer than {new} tokens are refused (HTTP 400): set it "
            "from your real traffic, not from one test",
            verify="the KV pool at start-up and the refused requests",
        ),
        ActionSpec(
            id="raise_max_model_len",
            knob="max_model_len",
            target=raise_mml,
            title="raise {flag} {old} → {new} (the longest request × 1.1)",
            expected="the longest requests are served instead of refused ({pool_change})",
            risk="one request may hold more of the KV pool; the engine refuses to start if one "
            "such sequence does not fit",
            verify="no HTTP 400 for long requests",
        ),
        ActionSpec(
            id="lower_gpu_memory_utilization",
            knob="gpu_memory_utilization",
            target=util_down,
            title="lower {flag} {old} → {new}",
            expected="more memory left outside vLLM's budget (CUDA graphs, NCCL, other "
            "processes): the out-of-memory error goes away",
            risk="a smaller KV pool: fewer requests at once, preemption sooner",
            verify="the engine starts and serves the same load without OOM",
        ),
        ActionSpec(
            id="lower_max_num_batched_tokens",
            knob="max_num_batched_tokens",
            target=mnbt_down,
            title="lower {flag} {old} → {new}",
            expected="a smaller activation peak per step (memory) and shorter steps",
            risk="lower prefill throughput; TTFT of long prompts rises",
            verify="start-up memory and TTFT",
        ),
        ActionSpec(
            id="enable_chunked_prefill",
            knob="enable_chunked_prefill",
            target=chunked_on,
            also=chunk_budget,
            title="enable chunked prefill: {flag}{also_flags}",
            expected="a long prompt is split into chunks that run beside the decodes: running "
            "streams stall for at most one chunk step instead of the whole prefill"
            "[[ (longest stall now {itl_max_ms:ms})]]",
            risk="the long prompt's own TTFT grows a little; a very small token budget lowers "
            "throughput; in vLLM V1 short prompts can still wait behind a long prompt's "
            "chunks — capping the input length bounds that",
            verify="the longest gap between two tokens and P99 TPOT at the same load",
        ),
        ActionSpec(
            id="long_prefill_threshold",
            knob="long_prefill_token_threshold",
            target=long_prefill_cap,
            title="cap one prompt's share of each step: {flag} {new} (vLLM V1)",
            expected="a long prompt's prefill takes at most {new} tokens of each step, so the "
            "short prompts behind it are prefilled in the same steps instead of waiting for "
            "all its chunks",
            risk="the long prompt's own TTFT grows (more, smaller chunks); with a very small "
            "cap, prefill throughput drops",
            verify="P99 TTFT of the short prompts at the same load",
        ),
        ActionSpec(
            id="shrink_prefill_steps",
            knob="max_num_batched_tokens",
            target=smaller_steps,
            title="shorten the steps that carry prefill: lower {flag} {old} → {new}",
            expected="each step computes at most {new} tokens, so a step that carries "
            "prefill holds the running streams back for a fraction of the time (a step's time "
            "grows with its tokens)[[; the longest stall now {stall_longest_ms:ms}]]",
            risk="prefill throughput drops and long prompts' TTFT grows (more, smaller "
            "chunks); below the running batch it caps decode too",
            verify="the longest gap between two tokens, P99 ITL and TPOT, and TTFT at the "
            "same load",
        ),
        ActionSpec(
            id="cap_input_length",
            title="cap the prompt length per request at the gateway (e.g. at your P99 prompt "
            "length; now up to {input_len_max:tok} tokens)",
            expected="bounds the longest prefill and the stall it causes; protects everyone "
            "else from one huge prompt",
            risk="refuses legitimate long prompts: choose the cap from real traffic",
            verify="the longest TTFT and stall",
        ),
        ActionSpec(
            id="rate_limit",
            target=served_rate,
            cost_step=3,
            title="rate-limit at the gateway to ≤ {new} req/s (75% of what the saturated "
            "server completed; the knee of a sweep gives the exact limit)",
            expected="the queue stops growing: TTFT returns to what the server does below "
            "capacity; excess requests are refused early (429) instead of waiting minutes",
            risk="refused requests must be retried or routed elsewhere; find the real knee "
            "with a sweep (servetune sweep --request-rates auto) before fixing the limit",
            verify="waiting requests flat and P99 TTFT at the limited rate",
        ),
        ActionSpec(
            id="rate_limit_at_knee",
            target=no_known_move,
            cost_step=3,
            title="rate-limit at the knee: ≤ {knee_rate} req/s (comfortable concurrency "
            "≈ {knee_conc})",
            expected="traffic stays on the flat part of the curve: P99 latency near {knee_p99}",
            risk="the excess must be refused, queued at the gateway or sent to another replica",
            verify="P99 latency and throughput at the limit",
        ),
        ActionSpec(
            id="add_gpus",
            knob="tensor_parallel_size",
            target=tp_up,
            cost_step=4,
            title="only then add GPUs: {flag} {old} → {new}, or another replica behind the gateway",
            expected="more memory and compute per replica ({pool_change}) or twice the "
            "capacity with a second replica",
            risk="the most expensive step: take it only after steps 1–3 (the seed: most "
            "waste is GPUs bought and 30% used)",
            verify="the knee moves to a higher rate",
        ),
        ActionSpec(
            id="add_load",
            cost_step=2,
            title="send more load: sweep the rate upward to find the knee "
            "(servetune sweep --request-rates auto)",
            expected="throughput rises with the rate until the knee; in production, put more "
            "traffic on fewer replicas until KV/GPU use reaches ~80%",
            risk="none for a test; in production, consolidate step by step and watch P99",
            verify="the knee of the sweep",
        ),
        ActionSpec(
            id="quality_regression",
            title="run a quality regression of the quantized model (accuracy / perplexity / "
            "your own samples) against the bf16 baseline",
            expected="a load test cannot see quality; this does",
            risk="if quality drops: a better quantization (e.g. Q4_K_M → Q5_K_M, int4 → fp8) "
            "or back to bf16",
            verify="the quality metric of your task",
        ),
        ActionSpec(
            id="fresh_prompts",
            title="re-run with prompts the server has not seen: leave out --seed (a fresh one "
            "is drawn per run and per sweep level), or restart the server between runs",
            expected="TTFT and throughput of traffic the cache cannot answer; the hit rate "
            "falls to what the workload implies",
            risk="none",
            verify="the run's prefix-cache hit rate is within what its workload implies",
        ),
        ActionSpec(
            id="fix_client",
            title="give the load generator more room: more --workers, or run it on its own host",
            expected="the planned rate is really offered; the figures describe the server",
            risk="none",
            verify="client send lag P99 < 5 ms and achieved ≥ 97% of the target rate",
        ),
    )
}
