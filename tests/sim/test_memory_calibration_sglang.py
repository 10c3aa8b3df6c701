"""SGLang's memory planner: the published start-up lines (``pytest -s`` prints the table),
its default rules in closed form, its refusals in SGLang's words, and its log lines."""

from __future__ import annotations

import pytest

from servetune.arch import memory_sglang as ms
from servetune.arch.deployment import GIB
from servetune.errors import SimError
from servetune.sim.config import EngineConfig
from servetune.sim.memory import plan_memory
from servetune.sim.memory_calibration_sglang import TOLERANCE, calibration_data, evaluate, table


def test_published_pools_within_tolerance() -> None:
    results = evaluate()
    print("\n" + table(results))
    held = [c for c in results if not c.excluded and not c.partial]
    assert len(held) >= 4
    for c in held:
        assert c.planned is not None, (c.id, c.refusal)
        assert abs(c.error or 0) <= TOLERANCE, (c.id, c.published, c.planned)
    # nothing SGLang started is refused
    assert all(c.refusal is None for c in results)
    # every case names a source the file describes
    sources = calibration_data()["sources"]
    assert all(c.source in sources for c in results)


def test_the_logged_defaults_are_the_rules() -> None:
    """Where a log printed SGLang's own choice of the defaults, the rule gives it."""
    cases = {x["id"]: x for x in calibration_data()["cases"]}
    for c in evaluate():
        p = cases[c.id]["published"]
        assert c.plan is not None
        if "mem_fraction_static" in p and "gpu_memory_utilization" not in c.config:
            assert c.plan.mem_fraction_static == p["mem_fraction_static"], c.id
        if "chunked_prefill_size" in p:
            assert c.plan.chunked_prefill_size == p["chunked_prefill_size"], c.id
        if "cuda_graph_max_bs" in p:
            assert c.plan.cuda_graph_max_bs == p["cuda_graph_max_bs"], c.id
        if "max_running_requests" in p:
            assert c.plan.max_running_requests == p["max_running_requests"], c.id
        if "free_at_start_gib" in p:
            assert c.plan.free_at_start_gib == pytest.approx(p["free_at_start_gib"], abs=0.02)


@pytest.mark.parametrize(
    "gib,tp,dp,attn,rules,chunk,graph_bs,mfs",
    [
        # 0.4: by TP size; small cards get chunk 2048 and graphs to 8 / 80
        (79.18, 1, 1, False, "0.4", 8192, 160, 0.88),
        (22.0, 4, 1, False, "0.4", 2048, 80, 0.85),
        (22.0, 1, 1, False, "0.4", 2048, 8, 0.88),
        (139.81, 8, 1, False, "0.4", 8192, 160, 0.81),
        (139.81, 16, 1, False, "0.4", 8192, 160, 0.79),
        # 0.5: reserved = 512 + 1.5 max(chunk, 2048) + 2 graph_bs + tp/8 GiB, >= 10 GiB > 60 GiB
        (79.18, 1, 1, False, "0.5", 8192, 256, round(1 - 13440 / (79.18 * 1024), 3)),
        (79.18, 8, 1, False, "0.5", 8192, 512, round(1 - 14848 / (79.18 * 1024), 3)),
        (178.35, 1, 1, False, "0.5", 16384, 512, round(1 - 26240 / (178.35 * 1024), 3)),
        (44.39, 1, 1, False, "0.5", 4096, 32, round(1 - 6848 / (44.39 * 1024), 3)),
        # DP attention: + 3 x graph_bs x dp (+ 1.5 x above 300), chunk / dp
        (
            139.81,
            8,
            8,
            True,
            "0.5",
            1024,
            512,
            round(1 - (14848 + 512 * 8 * 4.5) / (139.81 * 1024), 3),
        ),
    ],
)
def test_memory_settings_closed_form(
    gib: float,
    tp: int,
    dp: int,
    attn: bool,
    rules: str,
    chunk: int,
    graph_bs: int,
    mfs: float,
) -> None:
    s = ms.memory_settings(gib, tp, ms.RULES[rules], dp=dp, dp_attention=attn)
    assert (s.chunked_prefill_size, s.cuda_graph_max_bs, s.mem_fraction_static) == (
        chunk,
        graph_bs,
        mfs,
    )


def test_given_values_are_kept() -> None:
    s = ms.memory_settings(
        79.18,
        1,
        ms.RULES["0.5"],
        chunked_prefill_size=4096,
        cuda_graph_max_bs=32,
        mem_fraction_static=0.7,
    )
    assert (s.chunked_prefill_size, s.cuda_graph_max_bs, s.mem_fraction_static) == (4096, 32, 0.7)


def test_pool_formula_closed_form() -> None:
    """max_total_num_tokens = (after_load − free × (1 − mfs)) // cell, page-aligned."""
    cfg = EngineConfig(
        engine="sglang",
        gpu="H100-SXM",
        model="Qwen3-8B",
        gpu_memory_utilization=0.8,
        block_size=16,
    )
    p = plan_memory(cfg)
    free = p.free_at_start_gib * GIB
    after = free - p.weights_gib * GIB
    cell = 36 * 8 * 128 * 2 * 2
    tokens = int((after - free * 0.2) // cell) // 16 * 16
    assert p.kv_bytes_per_token == cell
    assert p.kv_cache_tokens == tokens
    assert p.num_gpu_blocks == tokens // 16
    assert p.mem_fraction_static == 0.8


def test_mla_cell_is_the_latent_on_every_rank() -> None:
    p = plan_memory(
        EngineConfig(engine="sglang", gpu="H200", model="DeepSeek-R1", tensor_parallel_size=8)
    )
    assert p.kv_bytes_per_token == (512 + 64) * 61 * 2
    lines = p.log_lines()
    assert any(x.startswith("KV Cache is allocated. #tokens: ") and "KV size:" in x for x in lines)
    # data-parallel attention: every attention replica keeps a pool of its own
    d = plan_memory(
        EngineConfig(
            engine="sglang",
            gpu="H200",
            model="DeepSeek-R1",
            tensor_parallel_size=8,
            data_parallel_size=8,
            enable_dp_attention=True,
        )
    )
    assert d.kv_bytes_per_token == p.kv_bytes_per_token
    assert d.engine_blocks == d.num_gpu_blocks * 8
    assert d.weights_gib > p.weights_gib  # attention no longer split eight ways


def test_sliding_window_pools() -> None:
    """gpt-oss: 12 full + 12 sliding layers → full = tokens × 24 / (0.8 × 12 + 12)."""
    p = plan_memory(EngineConfig(engine="sglang", gpu="H100-SXM", model="gpt-oss-20b"))
    cells = int(p.kv_cache_gib * GIB // p.kv_bytes_per_token)
    assert p.kv_cache_tokens == pytest.approx(cells * 24 / (0.8 * 12 + 12), abs=2)
    assert p.swa_tokens == int(p.kv_cache_tokens * 0.8)
    assert any("Use sliding window memory pool" in line for line in p.log_lines())


def test_refusals_in_sglangs_words() -> None:
    with pytest.raises(SimError, match="CUDA out of memory while loading the weights") as e1:
        plan_memory(EngineConfig(engine="sglang", gpu="H100-SXM", model="DeepSeek-R1"))
    assert e1.value.code == "sim.weights_do_not_fit"
    with pytest.raises(
        SimError, match=r"Not enough memory\. Please try to increase --mem-fraction-static\."
    ) as e2:
        plan_memory(
            EngineConfig(
                engine="sglang",
                gpu="H100-SXM",
                model="Llama-3.1-70B",
                tensor_parallel_size=2,
                gpu_memory_utilization=0.4,
            )
        )
    assert e2.value.hint is not None and "gpu_memory_utilization above" in e2.value.hint
    sglang_flags = {"gpu_memory_utilization": "--mem-fraction-static"}  # as the CLI names it
    shown = e2.value.shown(lambda f: sglang_flags.get(f, f))[1] or ""
    assert "--mem-fraction-static above" in shown
    with pytest.raises(SimError, match="Capture cuda graph failed") as e3:
        plan_memory(
            EngineConfig(
                engine="sglang", gpu="H100-SXM", model="Qwen3-8B", gpu_memory_utilization=1.0
            )
        )
    assert e3.value.code == "sim.graph_capture_oom"


def test_versions() -> None:
    assert ms.rules_for("0.4.3.post4").name == "0.4"
    assert ms.rules_for("v0.5.2").name == "0.5"
    assert ms.rules_for(None).name == ms.DEFAULT_RULES
    with pytest.raises(SimError, match="unknown SGLang version"):
        ms.rules_for("latest")
