"""``will_not_start``: the config doctor's finding when vLLM would refuse to start — the
weights, one max-model-len sequence, or the budget do not fit (the memory planner's reason
code) — with the changes the planner accepts, cheapest first.
"""

from __future__ import annotations

from servetune.diagnose.engine_flags import engine_flags
from servetune.diagnose.model import Action, Finding
from servetune.errors import ServetuneError, SimError
from servetune.knobs import KnobValue
from servetune.profiles import NEUTRAL
from servetune.sim.config import EngineConfig
from servetune.sim.memory import plan_memory
from servetune.sim.resolved import ResolvedConfig


def _fix_candidates(
    cfg: EngineConfig, r: ResolvedConfig | None, err: SimError
) -> list[tuple[str, KnobValue, int]]:
    """(knob, value, cost step) changes worth trying for this refusal, chosen by its reason
    code (:mod:`servetune.errors`), never by the wording of its message."""
    code = err.code
    out: list[tuple[str, KnobValue, int]] = []
    util = cfg.gpu_memory_utilization
    mml = r.max_model_len if r is not None else cfg.max_model_len
    if code == "sim.batch_below_model_len":
        out.append(("enable_chunked_prefill", True, 0))
        if mml is not None:
            out.append(("max_num_batched_tokens", mml, 0))
        return out
    if code == "sim.model_len_above_model" and r is None:
        from servetune.arch.models import find_model

        out.append(("max_model_len", find_model(cfg.model).max_position_embeddings, 0))
        return out
    if code in ("sim.free_memory_short", "sim.graph_capture_oom"):
        for v in (0.92, 0.9, 0.85):
            if v < util:
                out.append(("gpu_memory_utilization", v, 0))
        return out
    if cfg.kv_cache_dtype == "auto":
        out.append(("kv_cache_dtype", "fp8", 1))
    if cfg.quantization is None:
        out += [("quantization", "fp8", 1), ("quantization", "awq", 1)]
    for v in (0.92, 0.95):
        if v > util:
            out.append(("gpu_memory_utilization", v, 2))
    if code == "sim.model_len_above_pool" and mml:
        # vLLM's "estimated maximum model length": what the pool holds (it does not depend
        # on max_model_len itself).
        try:
            pool = plan_memory(cfg.model_copy(update={"max_model_len": 1024})).kv_cache_tokens
        except ServetuneError:
            pool = 0
        for cand in (pool, mml // 2, mml // 4):
            if cand and cand < mml:
                out.append(("max_model_len", (int(cand) // 1024) * 1024 or int(cand), 2))
    if code == "sim.no_kv_memory" and r is not None:
        out.append(("max_num_batched_tokens", max(2048, r.max_num_batched_tokens // 2), 0))
    for tp in (2, 4, 8):
        if tp > cfg.tensor_parallel_size:
            out.append(("tensor_parallel_size", tp, 4))
    return out


def refusal_finding(cfg: EngineConfig, r: ResolvedConfig | None, err: SimError) -> Finding:
    actions: list[Action] = []
    seen: set[str] = set()
    for knob, value, step in _fix_candidates(cfg, r, err):
        if knob in seen:
            continue
        changed = EngineConfig.model_validate({**cfg.model_dump(), knob: value})
        try:
            plan = plan_memory(changed)
        except ServetuneError:
            continue
        seen.add(knob)
        old = getattr(cfg, knob)
        flags = engine_flags(knob, old, value)
        actions.append(
            Action(
                id=f"start_{knob}",
                title=f"{flags[NEUTRAL].split('  (was')[0]}",
                knob=knob,
                from_value=old,
                to_value=value,
                flags=flags,
                expected=f"the planner says it starts: KV pool {plan.kv_cache_tokens:,} tokens, "
                f"maximum concurrency {plan.max_concurrency:.2f}× at {plan.max_model_len:,} "
                "tokens per request",
                risk={
                    "quantization": "quality can drop: run a quality regression before rollout",
                    "kv_cache_dtype": "fp8 KV adds quantization error: check quality",
                    "gpu_memory_utilization": "less headroom for CUDA graphs and other "
                    "processes (OOM risk under load); canary first",
                    "max_model_len": "longer requests are refused (HTTP 400)",
                    "tensor_parallel_size": "more GPUs: the most expensive fix",
                    "enable_chunked_prefill": "a long prompt's own TTFT grows a little",
                    "max_num_batched_tokens": "a bigger activation peak: less KV pool",
                }.get(knob, ""),
                cost_step=step,
                verify="the engine starts (servetune engine start vllm …) and prints this pool",
            )
        )
    actions.sort(key=lambda a: a.cost_step or 2.5)
    return Finding(
        rule="will_not_start",
        kind="warning",
        scope="config",
        title=f"Will not start: {err.message}",
        seed="OOM → memory utilisation too high → lower --gpu-memory-utilization or "
        "--max-model-len",
        priority=200,
        evidence=[f"vLLM's hint: {err.hint}"] if err.hint else [],
        actions=actions,
    )
