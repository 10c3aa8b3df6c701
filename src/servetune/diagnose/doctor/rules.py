"""The config doctor's rules (data, like the run rules in :mod:`servetune.diagnose.rules`),
read over a config's figures (:mod:`servetune.diagnose.doctor.figures`):

- ``pool_below_batch`` the KV pool holds fewer than max-num-seqs average requests:
                       preemption ahead once the batch fills;
- ``max_model_len_oversized``  max-model-len far beyond the workload's longest request;
- ``max_model_len_loose``      the same, when lowering it would not grow the pool;
- ``prompts_exceed_batch``     without chunked prefill, max-num-batched-tokens smaller than
                               the longest prompt;
- ``prefill_stall_ahead``      without chunked prefill, the longest prompt runs as one step
                               that stalls every running stream;
- ``workload_too_long``        requests longer than max-model-len are refused;
- ``seq_cap_below_pool``       the pool holds many times max-num-seqs: the cap binds first;
- ``quantized_quality``        quantized: check quality before rollout.

``will_not_start`` is no rule here: it is vLLM's own refusal
(:mod:`servetune.diagnose.doctor.refusal`).
"""

from __future__ import annotations

from servetune.diagnose.conditions import Cond
from servetune.diagnose.rules import RULES_BY_ID, Rule
from servetune.metrics.timeline import STALL_MIN_MS

OVERSIZED = 4.0
POOL_GAIN = 0.02
STALL_MS = STALL_MIN_MS
CAP_BINDS = 4.0

# Shared by the two --max-model-len rules (oversized: the pool would grow; loose: it would not).
_MML_OVER_WORKLOAD = Cond(
    "mml_over_workload",
    ">=",
    OVERSIZED,
    "--max-model-len / longest request {mml_over_workload:x} (rule: ≥ 4×)",
)
_MML_EVIDENCE = (
    "vLLM will print: maximum concurrency for {max_model_len:tok} tokens per request "
    "{max_concurrency_at_mml:x}"
)

DOCTOR_RULES: tuple[Rule, ...] = (
    Rule(
        id="pool_below_batch",
        kind="warning",
        priority=90,
        seed="KV pool full → preemption (predicted before launch)",
        verdict="Preemption ahead: the KV pool ({kv_pool_tokens:tok} tokens) holds only "
        "{pool_requests:num} requests of {tokens_per_request:tok} tokens, but --max-num-seqs "
        "lets {max_num_seqs:int} run at once",
        when=(
            Cond(
                "pool_per_seq",
                "<",
                1.0,
                "the pool holds {pool_per_seq:x} of --max-num-seqs average requests (rule: < 1×)",
            ),
        ),
        # Requests that do not fit max-model-len are refused, not preempted.
        unless=(Cond("mml_over_workload", "<", 1.0, ""),),
        evidence=(
            "KV pool {kv_pool_tokens:tok} tokens; a request of the workload's mean size "
            "(prompt {workload_input_len:tok} + output {workload_output_len:tok}) holds "
            "{tokens_per_request:tok} at its end",
            "--max-num-seqs {max_num_seqs:int} such requests need {kv_use_at_cap:pct} of the pool",
        ),
        actions=(
            "kv_cache_fp8",
            "quantize_weights",
            "raise_gpu_memory_utilization",
            "lower_max_num_seqs",
            "add_gpus",
        ),
    ),
    Rule(
        id="max_model_len_oversized",
        kind="warning",
        priority=70,
        seed="--max-model-len too big wastes the KV pool",
        verdict="--max-model-len {max_model_len:tok} is {mml_over_workload:x} the workload's "
        "longest request ({workload_request_max:tok} tokens) and wastes KV pool: lowering it "
        "gives the pool {mml_pool_gain:pct} more (without chunked prefill the step budget, and "
        "with it the activation peak, follows --max-model-len)",
        when=(
            _MML_OVER_WORKLOAD,
            Cond(
                "mml_pool_gain",
                ">",
                POOL_GAIN,
                "the pool grows {mml_pool_gain:pct} when it is lowered (rule: > 2%)",
            ),
        ),
        evidence=(_MML_EVIDENCE,),
        actions=("lower_max_model_len",),
    ),
    Rule(
        id="max_model_len_loose",
        kind="advisory",
        priority=40,
        seed="--max-model-len sets the KV pool's theoretical peak; too big wastes it",
        verdict="--max-model-len {max_model_len:tok} is {mml_over_workload:x} the workload's "
        "longest request ({workload_request_max:tok} tokens): in vLLM V1 that costs no KV "
        "memory by itself (the pool is what memory is left), but one request may hold up to "
        "{mml_pool_share:pct} of the pool — cap it near the longest request you serve",
        when=(_MML_OVER_WORKLOAD,),
        unless=(Cond("mml_pool_gain", ">", POOL_GAIN, ""),),
        evidence=(_MML_EVIDENCE,),
        actions=("lower_max_model_len",),
    ),
    Rule(
        id="prompts_exceed_batch",
        kind="warning",
        priority=95,
        seed="max-num-batched-tokens too small for the prompts without chunked prefill",
        verdict="--max-num-batched-tokens {max_num_batched_tokens:tok} is smaller than the "
        "longest prompt ({workload_input_max:tok} tokens) and chunked prefill is off: such a "
        "prompt never fits in one step",
        when=(
            Cond("enable_chunked_prefill", "==", 0, "chunked prefill off"),
            Cond(
                "mnbt_over_prompt",
                "<",
                1.0,
                "--max-num-batched-tokens / longest prompt {mnbt_over_prompt:x} (rule: < 1×)",
            ),
        ),
        actions=("enable_chunked_prefill",),
    ),
    Rule(
        id="prefill_stall_ahead",
        kind="warning",
        priority=60,
        seed="TTFT spikes → long prompts block: chunked prefill (predicted before launch)",
        verdict="Without chunked prefill, the longest prompt ({workload_input_max:tok} tokens) "
        "runs as one step of ≈ {prefill_stall_ms:ms} that stalls every running stream",
        when=(
            Cond("enable_chunked_prefill", "==", 0, "chunked prefill off"),
            Cond(
                "prefill_stall_ms",
                ">=",
                STALL_MS,
                "a whole prefill of the longest prompt ≈ {prefill_stall_ms:ms} (rule: ≥ 250 ms)",
            ),
        ),
        actions=("enable_chunked_prefill", "cap_input_length"),
    ),
    Rule(
        id="workload_too_long",
        kind="warning",
        priority=92,
        seed="--max-model-len too small truncates",
        verdict="Requests of up to {workload_request_max:tok} tokens exceed --max-model-len "
        "{max_model_len:tok}: vLLM refuses them (HTTP 400)",
        when=(
            Cond(
                "mml_over_workload",
                "<",
                1.0,
                "--max-model-len / longest request {mml_over_workload:x} (rule: < 1×)",
            ),
        ),
        actions=("raise_max_model_len",),
    ),
    Rule(
        id="seq_cap_below_pool",
        kind="advisory",
        priority=30,
        seed="cost order step 2: push GPU/KV use to 80%+ by tuning batch/concurrency",
        verdict="--max-num-seqs {max_num_seqs:int} binds long before memory: the pool holds "
        "{pool_requests:num} requests of this size ({pool_per_seq:x}), so KV use will stay "
        "under ≈ {kv_use_at_cap:pct}",
        when=(
            Cond(
                "pool_per_seq",
                ">=",
                CAP_BINDS,
                "the pool holds {pool_per_seq:x} of --max-num-seqs requests (rule: ≥ 4×)",
            ),
        ),
        actions=("raise_max_num_seqs",),
    ),
    RULES_BY_ID["quantized_quality"],
)
