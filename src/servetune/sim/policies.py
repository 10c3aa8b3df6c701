"""What the simulated engine is given by the semantics it follows: its scheduler policy —
vLLM V1's (:class:`servetune.sim.engine.Engine`) or SGLang's
(:class:`servetune.sim.sched_sglang.SglangEngine`) — and its ``/metrics`` page (vLLM's names or
SGLang's). Every caller that builds an engine or renders its page asks here."""

from __future__ import annotations

from collections.abc import Callable

from servetune.arch.memory import MemoryPlan
from servetune.sim import exposition, exposition_sglang
from servetune.sim.engine import Engine
from servetune.sim.hist import Hist
from servetune.sim.perf import StepModel
from servetune.sim.resolved import ResolvedConfig
from servetune.sim.sched_sglang import SglangEngine
from servetune.sim.semantics import SGLANG_SRT, VLLM_V1

POLICIES: dict[str, type[Engine]] = {VLLM_V1: Engine, SGLANG_SRT: SglangEngine}


def make_engine(r: ResolvedConfig, mem: MemoryPlan, model: StepModel | None = None) -> Engine:
    """The engine core for ``r`` with its memory plan."""
    return POLICIES[r.semantics](r, mem, model)


MetricsPage = Callable[[Engine, ResolvedConfig, MemoryPlan, Hist], bytes]
PAGES: dict[str, MetricsPage] = {
    VLLM_V1: exposition.render,
    SGLANG_SRT: exposition_sglang.render,
}


def metrics_page(r: ResolvedConfig) -> MetricsPage:
    """The ``/metrics`` renderer of the engine ``r`` simulates."""
    return PAGES[r.semantics]
