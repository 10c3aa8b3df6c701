"""The simulated engine's start-up memory plan: its configuration resolved, then planned by
the memory planner of the engine it simulates (:mod:`servetune.arch.memory` for vLLM,
:mod:`servetune.arch.memory_sglang` for SGLang, where the rules and their sources are)."""

from __future__ import annotations

from servetune.arch import memory_sglang
from servetune.arch.memory import MemoryPlan, Sampler, VllmMemoryRules, plan_for
from servetune.arch.precision import HopperMxfp4Kernel
from servetune.sim.config import EngineConfig
from servetune.sim.resolved import ResolvedConfig
from servetune.sim.semantics import SGLANG_SRT


def plan_memory(
    cfg: EngineConfig | ResolvedConfig,
    vllm_version: str | VllmMemoryRules | None = None,
    sampler: Sampler | None = None,
    hopper_mxfp4: HopperMxfp4Kernel | None = None,
) -> MemoryPlan:
    """The engine's start-up memory plan for ``cfg``; raises SimError where the engine
    refuses to start (``vllm_version``, ``sampler``, ``hopper_mxfp4``: see
    :func:`servetune.arch.memory.plan_for`; unset, the configuration's own — an SGLang
    configuration carries its ``sglang_version``)."""
    r = cfg.resolve() if isinstance(cfg, EngineConfig) else cfg
    if r.semantics == SGLANG_SRT:
        seqs = cfg.max_num_seqs if isinstance(cfg, EngineConfig) else None
        given = r.max_num_seqs * r.parallelism.attn_dp if seqs is None else seqs
        plan: MemoryPlan = memory_sglang.plan_for(r, r.sglang_version, given)
    else:
        plan = plan_for(
            r,
            vllm_version if vllm_version is not None else r.vllm_version,
            sampler if sampler is not None else r.sampler,
            hopper_mxfp4 if hopper_mxfp4 is not None else r.hopper_mxfp4,
        )
    return measured_pool(r, plan)


def pool_applies(r: ResolvedConfig) -> bool:
    """Does the KV pool a calibration measured apply to ``r``? Only at the deployment's own
    memory layout: the same tensor-parallel size, memory share, KV dtype and weights (any
    other changes the pool, and the planner sizes it)."""
    cal = r.calibration
    if cal is None or cal.kv_cache_tokens is None:
        return False
    dep = cal.deployment
    if r.tensor_parallel_size != dep.tensor_parallel_size:
        return False
    for knob in ("gpu_memory_utilization", "kv_cache_dtype", "quantization", "block_size"):
        if knob in dep.knobs and dep.knobs[knob] != getattr(r, knob):
            return False
    return True


def measured_pool(r: ResolvedConfig, plan: MemoryPlan) -> MemoryPlan:
    """``plan`` with the KV pool the calibration's server showed, where it applies."""
    if not pool_applies(r):
        return plan
    assert r.calibration is not None and r.calibration.kv_cache_tokens is not None
    tokens = r.calibration.kv_cache_tokens
    blocks = max(1, tokens // plan.block_size)
    return plan.model_copy(
        update={
            "kv_cache_tokens": blocks * plan.block_size,
            "num_gpu_blocks": blocks,
            "engine_blocks": 0,
            "kv_cache_gib": blocks * plan.block_size * plan.kv_bytes_per_token / 2**30,
        }
    )
