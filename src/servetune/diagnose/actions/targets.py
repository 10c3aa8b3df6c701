"""Each action's move for one run: the knob's (old, new) from the run's figures — e.g. double
``max_num_seqs`` but stay within what the KV pool holds — or None when the action does not apply;
and the memory planner's answers (will it start, the KV pool before/after) for a changed knob.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from servetune.diagnose.figures.table import Figures
from servetune.diagnose.knobs import KnownConfig
from servetune.errors import ServetuneError
from servetune.knobs import KnobValue
from servetune.sim.config import SIM_KNOBS, EngineConfig

RATE_LIMIT_SHARE = 0.75
"""A single saturated run's rate limit: 75% of what it completed (a sweep finds the knee)."""

Move = tuple[KnobValue | None, KnobValue | None]
"""(from, to) for a knob; None where the value is unknown."""
Target = Callable[[Figures], Move | None]
"""The knob's move for this run, or None when the action does not apply to it."""


def _int(v: float | None) -> int | None:
    return None if v is None else int(v)


def double_seqs(fig: Figures) -> Move | None:
    cap = fig.get("max_num_seqs") or fig.get("running_cap")
    if not cap:
        return (None, None)
    new = int(cap) * 2
    pool = fig.get("pool_requests")
    if pool:
        # Stay where the pool still holds every running request at ~80% use.
        new = min(new, max(int(cap) + 1, int(pool * 0.8)))
    old = fig.get("max_num_seqs")
    return (_int(old), new)


def seqs_to_pool(fig: Figures) -> Move | None:
    pool = fig.get("pool_requests")
    old = fig.get("max_num_seqs")
    running = fig.get("running_mean")
    if pool:
        new = max(1, int(pool * 0.9))
    elif running:
        new = max(1, int(running * 0.8))
    else:
        return (_int(old), None)
    if old is not None and new >= old:
        return None
    return (_int(old), new)


def kv_fp8(fig: Figures) -> Move | None:
    if fig.get("kv_fp8"):
        return None
    return (fig.config.get("kv_cache_dtype") or "auto", "fp8")


def weights(fig: Figures) -> Move | None:
    if fig.get("quantized"):
        return None
    new = "fp8"
    gpu = fig.config.gpu
    if gpu:
        from servetune.arch.gpus import find_gpu

        try:
            if find_gpu(gpu).fp8_tflops is None:
                new = "awq"
        except ServetuneError:
            pass
    return (fig.config.get("quantization"), new)


def weights_for_speed(fig: Figures) -> Move | None:
    """Quantizing weights to relieve a saturated engine: only where it speeds the bound
    part up (fp8 tensor cores for compute-bound work; int4 for memory-bound decode)."""
    got = weights(fig)
    if got is None:
        return None
    compute_bound = (fig.get("compute_use_est") or 0.0) >= 0.35 or (
        fig.get("gpu_utilization_mean") or 0.0
    ) >= 0.9
    if compute_bound and got[1] != "fp8":
        return None
    return got


def util_up(fig: Figures) -> Move | None:
    old = fig.get("gpu_memory_utilization")
    if old is None:
        return (None, None)
    if old >= 0.95:
        return None
    for new in (min(0.95, round(old + 0.05, 2)), round(old + 0.03, 2), round(old + 0.02, 2)):
        if new <= old:
            continue
        if _plan_error(fig.config, "gpu_memory_utilization", new) is None:
            return (old, new)
    return None


def util_down(fig: Figures) -> Move | None:
    old = fig.get("gpu_memory_utilization")
    if old is None:
        return (None, None)
    return (old, round(max(0.5, old - 0.05), 2))


def max_model_len_down(fig: Figures) -> Move | None:
    old = fig.get("max_model_len")
    longest = fig.get("max_request_tokens")
    if old is None or longest is None:
        return (_int(old), None)
    new = int(math.ceil(longest * 1.25 / 1024) * 1024)
    if new >= old:
        return None
    return (int(old), new)


def raise_mml(fig: Figures) -> Move | None:
    old = fig.get("max_model_len")
    need = fig.get("workload_request_max") or fig.get("max_request_tokens")
    if old is None or need is None or need <= old:
        return None
    return (int(old), int(math.ceil(need * 1.1 / 1024) * 1024))


def chunked_on(fig: Figures) -> Move | None:
    if fig.get("enable_chunked_prefill") == 1:
        return None
    return (False if fig.has("enable_chunked_prefill") else None, True)


def chunk_budget(fig: Figures) -> dict[str, KnobValue]:
    """With chunked prefill on, the step budget can drop to vLLM's default for the GPU
    (2048 on A100-class and smaller): without it, it had to hold a whole max-model-len."""
    old = fig.get("max_num_batched_tokens")
    budget = 2048
    gpu = fig.config.gpu
    if gpu:
        from servetune.arch.gpus import find_gpu
        from servetune.sim.config import batch_defaults

        try:
            budget = batch_defaults(find_gpu(gpu), "openai_api_server")[0]
        except ServetuneError:
            pass
    seqs = fig.get("max_num_seqs")
    if seqs is not None:
        budget = max(budget, int(seqs))
    if old is not None and old <= budget:
        return {}
    return {"max_num_batched_tokens": budget}


def long_prefill_cap(fig: Figures) -> Move | None:
    budget = fig.get("max_num_batched_tokens") or 2048.0
    new = max(256, int(budget) // 4)
    old = fig.get("long_prefill_token_threshold")
    if old and old <= new:
        return None
    return (None if old is None else int(old), new)


def smaller_steps(fig: Figures) -> Move | None:
    """Halve the step budget (chunked prefill on): a step that carries a prefill chunk holds
    the decodes about half as long. Never below the running cap or 512 tokens."""
    if fig.get("enable_chunked_prefill") == 0:
        return None
    old = fig.get("max_num_batched_tokens")
    if old is None:
        return (None, None)
    floor = max(512, int(fig.get("max_num_seqs") or 0))
    longest, limit = fig.get("stall_longest_ms"), fig.get("stall_limit_ms")
    if longest and limit and longest > limit:
        # a step's time grows with its tokens: scale the budget so the longest stall would
        # end below the stall limit (with a fifth to spare), down to a power of two
        want = old * 0.8 * limit / longest
        new = max(floor, 2 ** int(math.log2(max(want, 1.0))))
    else:
        new = max(floor, int(old) // 2)
    if new >= old:
        return None
    return (int(old), new)


def tp_up(fig: Figures) -> Move | None:
    tp = fig.get("tensor_parallel_size")
    if tp is None:
        return (None, None)
    return (int(tp), int(tp) * 2)


def served_rate(fig: Figures) -> Move | None:
    thr = fig.get("request_throughput")
    if thr is None:
        return (None, None)
    # The knee lies well below the saturation throughput (queueing delay grows like
    # 1 / (1 − utilisation)); a quarter below it is a safe start until a sweep finds the knee.
    return (None, round(thr * RATE_LIMIT_SHARE, 2))


def mnbt_down(fig: Figures) -> Move | None:
    old = fig.get("max_num_batched_tokens")
    if old is None:
        return (None, None)
    return (int(old), max(2048, int(old) // 2))


def no_known_move(fig: Figures) -> Move | None:
    return (None, None)


def _plan_error(config: KnownConfig, knob: str, value: KnobValue) -> str | None:
    """None when the planner accepts the config with ``knob = value``, else its message."""
    from servetune.sim.memory import plan_memory

    ec = config.engine_config
    if ec is None:
        return None
    try:
        plan_memory(ec.model_copy(update={knob: value}))
    except ServetuneError as exc:
        return exc.message
    return None


def what_if_pool(config: KnownConfig, knob: str, value: KnobValue) -> tuple[int, int] | str | None:
    """(KV pool tokens before, after) with ``knob = value`` from the memory planner; a message
    when it would not start; None when the GPU/model are unknown."""
    from servetune.sim.memory import plan_memory

    ec = config.engine_config
    if ec is None or knob not in SIM_KNOBS:
        return None
    try:
        before = plan_memory(ec).kv_cache_tokens
    except ServetuneError:
        return None
    try:
        changed = EngineConfig.model_validate({**ec.model_dump(), knob: value})
        after = plan_memory(changed).kv_cache_tokens
    except (ServetuneError, ValueError) as exc:
        msg = exc.message if isinstance(exc, ServetuneError) else str(exc)
        return f"the memory planner says it would not start: {msg}"
    return before, after
