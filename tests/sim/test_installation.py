"""The vLLM installation simulated (its release, its profiling sampler, its Hopper MXFP4
kernel): fields of the engine configuration and flags of the CLI, each sizing the KV pool as
the memory planner's rules for that installation do."""

from __future__ import annotations

import pytest
from tests.conftest import run_cli

from servetune.arch.memory import rules_for
from servetune.errors import SimError
from servetune.sim.config import EngineConfig, checked
from servetune.sim.memory import plan_memory

QWEN3_235B = dict(model="Qwen/Qwen3-235B-A22B", gpu="H100-SXM", tensor_parallel_size=8)


def test_the_sampler_sizes_the_pool_as_the_rules_for_that_installation_do() -> None:
    """FlashInfer's top-k/top-p kernel costs less of the profiling peak than PyTorch's sort,
    so the same 0.11 release leaves a larger pool (and, at the model's full context, starts
    where the PyTorch image refuses)."""
    cfg = EngineConfig(**QWEN3_235B, max_model_len=32768, vllm_version="0.11.0")  # type: ignore[arg-type]
    torch = plan_memory(cfg.model_copy(update={"sampler": "pytorch"}))
    flash = plan_memory(cfg.model_copy(update={"sampler": "flashinfer"}))
    assert flash.kv_cache_tokens > torch.kv_cache_tokens
    # the configuration's own fields give what the planner's arguments give
    direct = plan_memory(cfg, "0.11.0", "flashinfer")
    assert direct.kv_cache_tokens == flash.kv_cache_tokens
    assert plan_memory(cfg, "0.11.0").kv_cache_tokens == plan_memory(cfg).kv_cache_tokens
    assert "flashinfer" in rules_for("0.11.0", "flashinfer").versions


def test_the_installation_is_in_the_run_summary() -> None:
    r = EngineConfig(vllm_version="0.10.1", sampler="pytorch").resolve()
    summary = r.summary()
    assert summary["vllm_version"] == "0.10.1" and summary["sampler"] == "pytorch"
    assert "vllm_version" not in EngineConfig().resolve().summary()


def test_a_sampler_the_release_fixes_is_refused_over_its_field() -> None:
    with pytest.raises(SimError) as e:
        checked(EngineConfig.model_construct(vllm_version="0.19", sampler="pytorch"))
    assert "cannot be chosen" in e.value.message
    assert "sampler" in (e.value.hint or "")


def test_an_unknown_release_is_refused() -> None:
    with pytest.raises(SimError, match="unknown vLLM version"):
        checked(EngineConfig.model_construct(vllm_version="1.x"))


def test_sglang_refuses_the_vllm_installation() -> None:
    with pytest.raises(SimError, match="SGLang's semantics do not read") as e:
        checked(EngineConfig.model_construct(engine="sglang", sampler="flashinfer"))
    assert "sglang_version" in (e.value.hint or "")


def test_the_cli_takes_the_installation_and_names_its_flags() -> None:
    ok = run_cli(
        "sim", "plan", "--model", "Qwen/Qwen3-235B-A22B", "--gpu", "H100-SXM",
        "--tensor-parallel-size", "8", "--vllm-version", "0.11.0", "--vllm-sampler",
        "flashinfer",
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert "memory planner: rules 0.11+flashinfer" in ok.stdout
    bad = run_cli("sim", "plan", "--vllm-version", "0.19", "--vllm-sampler", "pytorch")
    assert bad.returncode != 0
    assert "--vllm-sampler" in bad.stderr and "Traceback" not in bad.stderr
    base = run_cli("bench", "--base-url", "http://127.0.0.1:9", "--vllm-version", "0.11")
    assert base.returncode != 0 and "--vllm-version" in base.stderr
