"""The simulated engine's start-up memory plan: its configuration resolved, then planned by
the memory planner of the engine it simulates (:mod:`servetune.arch.memory` for vLLM,
:mod:`servetune.arch.memory_sglang` for SGLang, where the rules and their sources are)."""

from __future__ import annotations

from servetune.arch import memory_sglang
from servetune.arch.memory import MemoryPlan, Sampler, VllmMemoryRules, plan_for
from servetune.arch.precision import HopperMxfp4Kernel
from servetune.sim.config import SGLANG_SRT, EngineConfig, ResolvedConfig


def plan_memory(
    cfg: EngineConfig | ResolvedConfig,
    vllm_version: str | VllmMemoryRules | None = None,
    sampler: Sampler | None = None,
    hopper_mxfp4: HopperMxfp4Kernel | None = None,
) -> MemoryPlan:
    """The engine's start-up memory plan for ``cfg``; raises SimError where the engine
    refuses to start (``vllm_version``, ``sampler``, ``hopper_mxfp4``: see
    :func:`servetune.arch.memory.plan_for`; an SGLang configuration carries its own
    ``sglang_version``)."""
    r = cfg.resolve() if isinstance(cfg, EngineConfig) else cfg
    if r.semantics == SGLANG_SRT:
        seqs = cfg.max_num_seqs if isinstance(cfg, EngineConfig) else None
        given = r.max_num_seqs * r.parallelism.attn_dp if seqs is None else seqs
        return memory_sglang.plan_for(r, r.sglang_version, given)
    return plan_for(r, vllm_version, sampler, hopper_mxfp4)
