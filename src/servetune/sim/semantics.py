"""Whose semantics the simulated engine follows: vLLM V1's or SGLang's runtime, read from the
simulated engine's profile (``sim_semantics``)."""

from __future__ import annotations

from servetune.errors import SimError
from servetune.profiles import PROFILES
from servetune.profiles import find as find_profile

VLLM_V1 = "vllm-v1"
"""vLLM V1's semantics: its scheduler, memory planner, defaults, /metrics and ``vllm serve``."""
SGLANG_SRT = "sglang-srt"
"""SGLang's runtime (SRT): its scheduler policy, memory planner, server-argument defaults,
/metrics names and ``python -m sglang.launch_server`` line."""


def semantics_of(engine: str) -> str:
    """Whose semantics the simulated engine follows for ENGINE (its profile's
    ``sim_semantics``); a SimError naming the engines it models otherwise."""
    found = find_profile(engine)
    sem = found.sim_semantics if found is not None else None
    if sem is None:
        modelled = ", ".join(p.id for p in PROFILES if p.sim_semantics and not p.simulated)
        raise SimError.over_fields(
            f"the simulated engine does not model {engine!r}",
            hint=f"{{engine}} takes: {modelled}",
            code="sim.config",
        )
    return sem


def simulated_engines() -> list[str]:
    """The engines ``engine`` may name (their profiles say how the simulator models them)."""
    return [p.id for p in PROFILES if p.sim_semantics and not p.simulated]
