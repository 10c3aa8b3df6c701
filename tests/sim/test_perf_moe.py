"""The step model's terms for mixture-of-experts, MLA, windowed layers and EP/DP, each against
its closed form."""

from __future__ import annotations

import pytest

from servetune.arch.memory import plan_for
from servetune.arch.parallel import Parallelism
from servetune.arch.weights import rank_weights
from servetune.sim.config import EngineConfig
from servetune.sim.efficiency import efficiency
from servetune.sim.perf import StepModel


def step_model(**kw: object) -> StepModel:
    r = EngineConfig(**kw).resolve()  # type: ignore[arg-type]
    return StepModel(r)


def test_expert_coverage_is_the_expected_distinct_experts() -> None:
    """At batch B, top-k of E: E·(1 − (1 − k/E)^B) distinct experts, as a share of E."""
    m = step_model(gpu="H100-SXM", model="Qwen/Qwen3-30B-A3B")
    w = m.weights
    E, k = 128, 8
    for b in (1, 4, 16, 64, 512):
        assert w.expert_coverage(b) * E == pytest.approx(E * (1 - (1 - k / E) ** b))
    assert w.expert_coverage(1) == pytest.approx(k / E)


def test_decode_reads_only_the_experts_its_batch_routes_to() -> None:
    """Batch 1 of a 128-expert top-8 model reads 1/16 of the experts: far less than all."""
    m = step_model(gpu="H100-SXM", model="Qwen/Qwen3-30B-A3B")
    one = m.decode_coeffs(1).time(1000)
    big = m.decode_coeffs(256).time(256 * 1000)
    bw = m.bytes_per_s
    read_one = (m.weight_bytes + m.expert_bytes * 8 / 128) / bw
    assert one > read_one  # plus the CPU part
    assert one - read_one < 0.004
    assert big > one * 2  # nearly every expert at batch 256


def test_expert_parallel_splits_experts_and_dp_adds_all_to_all() -> None:
    base = dict(gpu="H200", model="deepseek-ai/DeepSeek-R1", max_model_len=8192)
    tp8 = step_model(**base, tensor_parallel_size=8)
    dp8 = step_model(**base, data_parallel_size=8, enable_expert_parallel=True)
    eff = efficiency(EngineConfig(**base).resolve().gpu)  # type: ignore[arg-type]
    # TP8: 2 all-reduces per layer, no all-to-all
    assert tp8.comm_fixed_s == pytest.approx(2 * 61 * eff.allreduce_latency_us / 1e6)
    # DP8 + EP: no all-reduce (attention TP 1), a dispatch and a combine per MoE layer
    assert dp8.tp == 1 and dp8.dp == 8
    assert dp8.comm_fixed_s == pytest.approx(2 * 58 * eff.alltoall_latency_us / 1e6)
    link = dp8.comm_per_token * (EngineConfig(**base).resolve().gpu.interconnect_gb_s * 1e9)
    assert link == pytest.approx(2 * 58 * 8 * 7 / 8 * 7168 * 2.0)
    # both hold 1/8 of the experts; DP attention replicates the attention weights
    assert dp8.expert_bytes == pytest.approx(tp8.expert_bytes)
    assert dp8.weight_bytes > tp8.weight_bytes


def test_mla_kv_under_tp_and_dp_attention() -> None:
    """MLA's latent is on every TP rank: TP8 holds 1/1 of each token's KV per GPU, DP
    attention holds only its own requests' (the pool of 8 replicas)."""
    base = dict(gpu="H200", model="deepseek-ai/DeepSeek-R1", max_model_len=8192)
    tp8 = EngineConfig(**base, tensor_parallel_size=8).resolve()
    dp8 = EngineConfig(**base, data_parallel_size=8, enable_expert_parallel=True).resolve()
    p_tp, p_dp = plan_for(tp8, "0.19.0"), plan_for(dp8, "0.19.0")
    assert p_tp.kv_bytes_per_token == p_dp.kv_bytes_per_token == 61 * 576 * 2
    assert p_dp.engine_blocks == 8 * p_dp.num_gpu_blocks
    assert p_tp.engine_blocks == p_tp.num_gpu_blocks


def test_weights_per_rank_follow_the_layout() -> None:
    r = EngineConfig(gpu="H200", model="deepseek-ai/DeepSeek-R1", tensor_parallel_size=8).resolve()
    m = r.model
    w1 = rank_weights(m, "fp8", Parallelism())
    w8 = rank_weights(m, "fp8", Parallelism.vllm(8))
    assert w8.experts == pytest.approx(w1.experts / 8)
    assert w1.resident / 2**30 == pytest.approx(m.param_count_of(mtp=False) / 2**30, rel=0.01)
    ep = rank_weights(m, "fp8", Parallelism.vllm(1, 8, expert_parallel=True))
    assert ep.experts == pytest.approx(w1.experts / 8)
    assert ep.dense == pytest.approx(w1.dense)  # DP attention: each replica holds it all


def test_window_terms_closed_form() -> None:
    m = step_model(gpu="H100-SXM", model="openai/gpt-oss-20b")
    assert m.window == 128
    # past the window every token attends to 128, the KV read is the window
    assert m.window_terms(100, 1000) == (100 * 128, 128)
    # inside the window: tokens o+1..o+c attend to themselves and their predecessors
    assert m.window_terms(10, 0) == (sum(range(1, 11)), 0)
    assert m.window_terms(100, 100) == (sum(range(101, 129)) + 72 * 128, 100)


def test_sliding_layers_cost_the_window_in_decode() -> None:
    """A decode batch past the window: the sliding layers read the same bytes whatever the
    context; the full layers grow with it."""
    m = step_model(gpu="H100-SXM", model="openai/gpt-oss-20b")
    c = m.decode_coeffs(64)
    t1, t2 = c.time(64 * 2000), c.time(64 * 4000)
    full_read = m.kv_bytes_per_token * 64 * 2000 / m.bytes_per_s
    assert t2 - t1 == pytest.approx(full_read, rel=0.35)
    assert c.cap == 64 * 128


def test_fp4_runs_natively_on_blackwell_and_weight_only_on_hopper() -> None:
    from servetune.arch.gpus import find_gpu
    from servetune.arch.precision import linear_rate

    assert linear_rate(find_gpu("B200"), "nvfp4") == (9000e12, True)
    rate, native = linear_rate(find_gpu("H100-SXM"), "nvfp4")
    assert rate == 989.4e12 and not native
    assert linear_rate(find_gpu("MI355X"), "nvfp4")[1]
    assert linear_rate(find_gpu("MI300X"), "fp8") == (2614.9e12, True)
