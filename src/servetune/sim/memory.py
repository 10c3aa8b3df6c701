"""The simulated engine's start-up memory plan: its configuration resolved, then planned by
the memory planner (:mod:`servetune.arch.memory`, where the rules and their sources are)."""

from __future__ import annotations

from servetune.arch.memory import MemoryPlan, VllmMemoryRules, plan_for
from servetune.sim.config import EngineConfig, ResolvedConfig


def plan_memory(
    cfg: EngineConfig | ResolvedConfig, vllm_version: str | VllmMemoryRules | None = None
) -> MemoryPlan:
    """vLLM's start-up memory plan for ``cfg``; raises SimError where vLLM refuses to start
    (``vllm_version``: see :func:`servetune.arch.memory.plan_for`)."""
    r = cfg.resolve() if isinstance(cfg, EngineConfig) else cfg
    return plan_for(r, vllm_version)
