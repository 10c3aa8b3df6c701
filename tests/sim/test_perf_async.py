"""Async scheduling in the step model: the CPU part of a step overlaps the GPU part
(vLLM ``--async-scheduling``), so a step takes the longer of the two, not their sum."""

from __future__ import annotations

import pytest

from servetune.results.schema import BenchConfig
from servetune.sim.config import EngineConfig
from servetune.sim.efficiency import efficiency
from servetune.sim.engine import Engine
from servetune.sim.memory import plan_memory
from servetune.sim.offline_run import OfflineRun
from servetune.sim.perf import StepModel
from servetune.workload.plan import Plan
from servetune.workload.spec import RequestSpec

TINY = EngineConfig(
    gpu="H100-SXM", model="Qwen/Qwen3-0.6B", max_model_len=4096, gpu_memory_utilization=0.5
)
BIG = EngineConfig(gpu="A100-80GB", model="Qwen/Qwen3-14B", max_model_len=8192)


def models(ec: EngineConfig) -> tuple[StepModel, StepModel]:
    r = ec.resolve()
    # no API server in front: the token gaps are the engine's steps
    eff = efficiency(r.gpu).model_copy(
        update={"frontend_per_request_ms": 0.0, "frontend_per_token_us": 0.0}
    )
    return (
        StepModel(r, eff.model_copy(update={"async_scheduling": False})),
        StepModel(r, eff.model_copy(update={"async_scheduling": True})),
    )


@pytest.mark.parametrize("ec", [TINY, BIG], ids=["0.6B-H100", "14B-A100"])
@pytest.mark.parametrize("n", [1, 7, 64, 256])
def test_a_step_takes_the_longer_of_cpu_and_gpu(ec: EngineConfig, n: int) -> None:
    sync, over = models(ec)
    cpu = sync.fixed_s + sync.per_seq_s * n
    for ctx in (0.0, 512.0 * n, 4096.0 * n):
        t_sync = sync.step_time(n, n, n, ctx)
        gpu = t_sync - cpu
        assert gpu > 0
        assert over.step_time(n, n, n, ctx) == pytest.approx(max(gpu, cpu), rel=1e-9)
        # the decode stretch's closed form agrees with the step model, both ways
        assert sync.decode_coeffs(n).time(ctx) == pytest.approx(t_sync, rel=1e-9)
        assert over.decode_coeffs(n).time(ctx) == pytest.approx(max(gpu, cpu), rel=1e-9)
    # a prefill step: the same rule
    t_sync = sync.step_time(2048, 1, 1, 0.0, prefill_attn=2048 * 1024.0)
    gpu = t_sync - (sync.fixed_s + sync.per_seq_s)
    assert over.step_time(2048, 1, 1, 0.0, prefill_attn=2048 * 1024.0) == pytest.approx(
        max(gpu, sync.fixed_s + sync.per_seq_s), rel=1e-9
    )


def mean_tpot(model: StepModel, n: int) -> float:
    r = TINY.resolve()
    plan = Plan(
        requests=[RequestSpec(prompt="", input_len=256, output_len=64) for _ in range(n)],
        offsets_ns=[0] * n,
    )
    mem = plan_memory(r)
    eng = Engine(r, mem, model)
    sim = OfflineRun(plan, BenchConfig(num_prompts=n), r, mem, engine=eng)
    sim.run()
    tpots = [t for x in sim.records if (t := x.tpot_ms) is not None]
    return sum(tpots) / len(tpots)


def test_a_cpu_bound_small_model_decodes_at_the_cpu_pace_with_overlap() -> None:
    sync, over = models(TINY)
    n = 200
    cpu_ms = (over.fixed_s + over.per_seq_s * n) * 1e3
    t_sync, t_async = mean_tpot(sync, n), mean_tpot(over, n)
    assert t_async < t_sync
    # a 0.6B model's decode step on an H100 is far below the CPU part: the steps run at it
    assert t_async == pytest.approx(cpu_ms, rel=0.25)
    assert t_sync > cpu_ms
