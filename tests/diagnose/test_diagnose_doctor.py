"""The config doctor: vLLM command lines read, and each pre-launch rule shown to fire and
not to fire; a refusal's fixes are ones the memory planner accepts; a predicted problem is
the one the simulated run then shows."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from servetune.diagnose import Diagnosis, diagnose_config, diagnose_path
from servetune.diagnose.actions.build import apply_action
from servetune.diagnose.doctor.check import engine_config_from_command
from servetune.errors import ConfigError, SimError
from servetune.knobs import parse_command
from servetune.sim.memory import plan_memory

SEED = (
    "vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len 32768 "
    "--gpu-memory-utilization 0.90 --max-num-seqs 256 --max-num-batched-tokens 8192"
)


def _fired(diag: Diagnosis) -> set[str]:
    return {f.rule for f in diag.findings if f.kind in ("warning", "bottleneck", "advisory")}


# --- reading command lines ---------------------------------------------------------------


def test_vllm_serve_and_api_server_forms() -> None:
    a = parse_command(SEED)
    assert a.entry == "vllm serve" and a.engine == "vllm"
    assert a.model == "Qwen/Qwen2.5-7B-Instruct"
    assert a.values == {
        "max_model_len": 32768,
        "gpu_memory_utilization": 0.9,
        "max_num_seqs": 256,
        "max_num_batched_tokens": 8192,
    }
    b = parse_command(
        "CUDA_VISIBLE_DEVICES=0 python -m vllm.entrypoints.openai.api_server "
        "--model Qwen/Qwen2.5-7B-Instruct --max_num_seqs=128 -tp 2 --port 8000 "
        "--enable-chunked-prefill false --kv-cache-dtype fp8 --api-key secret "
        "--disable-log-requests"
    )
    assert b.entry.startswith("python -m vllm.entrypoints")
    assert b.model == "Qwen/Qwen2.5-7B-Instruct"
    assert b.values["max_num_seqs"] == 128
    assert b.values["tensor_parallel_size"] == 2
    assert b.values["enable_chunked_prefill"] is False
    assert b.values["kv_cache_dtype"] == "fp8"
    assert b.ignored == ["--port 8000", "--api-key secret", "--disable-log-requests"]
    cfg, _ignored, unsupported = engine_config_from_command(
        "vllm serve Qwen/Qwen2.5-7B-Instruct --no-enable-chunked-prefill "
        "--quantization bitsandbytes --swap-space 8",
        "A100-80GB",
    )
    assert cfg.enable_chunked_prefill is False
    assert cfg.quantization is None and any("bitsandbytes" in u for u in unsupported)
    assert any("swap_space" in u for u in unsupported)
    d = parse_command("vllm serve m \\\n  --max-num-seqs 8")
    assert d.values["max_num_seqs"] == 8


def test_bad_command_lines_are_clear_errors() -> None:
    with pytest.raises(ConfigError, match="not an engine's command line"):
        parse_command("sglang.launch_server --model x")
    with pytest.raises(ConfigError, match="config doctor models vLLM"):
        engine_config_from_command("python -m sglang.launch_server --model-path x", "A100-80GB")
    with pytest.raises(ConfigError, match="expected an integer"):
        parse_command("vllm serve m --max-num-seqs lots")
    with pytest.raises(ConfigError, match="names no model"):
        engine_config_from_command("vllm serve --max-num-seqs 8", "A100-80GB")
    with pytest.raises(SimError, match="unknown gpu"):
        diagnose_config(SEED, "A100-81GB")


# --- will not start -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "gpu", "message", "first_knob"),
    [
        (
            "vllm serve Qwen/Qwen2.5-72B-Instruct --max-model-len 32768",
            "A100-80GB",
            "weights",
            "quantization",
        ),
        (
            "vllm serve Qwen/Qwen2.5-7B-Instruct --gpu-memory-utilization 0.99",
            "A100-80GB",
            "graph capture",
            "gpu_memory_utilization",
        ),
        (
            "vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len 32768 "
            "--gpu-memory-utilization 0.22",
            "A100-80GB",
            "max seq len",
            "kv_cache_dtype",
        ),
        (
            "vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len 32768 "
            "--no-enable-chunked-prefill --max-num-batched-tokens 4096",
            "A100-80GB",
            "max_num_batched_tokens",
            "enable_chunked_prefill",
        ),
    ],
)
def test_a_config_that_will_not_start_comes_with_fixes_that_do(
    command: str, gpu: str, message: str, first_knob: str
) -> None:
    diag = diagnose_config(command, gpu)
    f = diag.findings[0]
    assert f.rule == "will_not_start" and f.kind == "warning"
    assert message in f.title
    assert f.actions and f.actions[0].knob == first_knob
    cfg, _, _ = engine_config_from_command(command, gpu)
    with pytest.raises(SimError):
        plan_memory(cfg)
    for action in f.actions:
        assert plan_memory(apply_action(cfg, action)).num_gpu_blocks > 0, action.title
        assert "the planner says it starts" in action.expected
    assert not diag.healthy
    assert diag.headline.startswith("Will not start")


def test_the_seed_baseline_starts() -> None:
    diag = diagnose_config(SEED, "A100-80GB", input_len=1024, output_len=128)
    assert "will_not_start" not in _fired(diag)
    assert diag.healthy
    assert any("GPU KV cache size" in n for n in diag.notes)


# --- the rules against the workload --------------------------------------------------------


def test_preemption_ahead_when_the_pool_holds_fewer_than_max_num_seqs() -> None:
    small = "vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len 8192 --gpu-memory-utilization 0.3"
    diag = diagnose_config(small, "A100-80GB", input_len=2048, output_len=512)
    f = diag.findings[0]
    assert f.rule == "pool_below_batch"
    assert re.search(r"holds only [\d.]+ requests of 2,560 tokens", f.title)
    assert "256 run at once" in f.title
    assert [a.id for a in f.actions][:3] == [
        "kv_cache_fp8",
        "quantize_weights",
        "raise_gpu_memory_utilization",
    ]
    assert f.actions[-1].id == "add_gpus"
    roomy = diagnose_config(small, "A100-80GB", input_len=256, output_len=128)
    assert "pool_below_batch" not in _fired(roomy)


def test_the_predicted_preemption_is_what_the_run_shows(
    scenario_dir: Callable[[str], Path],
) -> None:
    """The doctor, given the kv_pool_full run's own lengths, predicts what the run shows."""
    run = scenario_dir("kv_pool_full")
    predicted = diagnose_config(
        "vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len 8192 --gpu-memory-utilization 0.3",
        "A100-80GB",
        run_dir=run,
    )
    assert predicted.findings[0].rule == "pool_below_batch"
    assert diagnose_path(run).findings[0].rule == "kv_pool_full"
    calm = diagnose_config(
        "vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len 8192 --gpu-memory-utilization 0.3"
        " --kv-cache-dtype fp8 --max-num-seqs 64",
        "A100-80GB",
        run_dir=run,
    )
    assert "pool_below_batch" not in _fired(calm)


def test_max_model_len_far_beyond_the_workload() -> None:
    # Without chunked prefill the step budget follows max-model-len: real pool wasted.
    off = diagnose_config(
        "vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len 32768 --no-enable-chunked-prefill",
        "A100-80GB",
        input_len=1024,
        output_len=128,
    )
    f = off.finding("max_model_len_oversized")
    assert f is not None and f.kind == "warning"
    assert "wastes KV pool" in f.title
    assert f.actions[0].knob == "max_model_len" and f.actions[0].to_value == 2048
    # With it on, vLLM V1's pool does not depend on it: said as an advisory, not a fault.
    on = diagnose_config(SEED, "A100-80GB", input_len=1024, output_len=128)
    assert on.finding("max_model_len_oversized") is None
    loose = on.finding("max_model_len_loose")
    assert loose is not None and loose.kind == "advisory"
    assert "costs no KV" in loose.title
    fit = diagnose_config(
        "vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len 2048",
        "A100-80GB",
        input_len=1024,
        output_len=128,
    )
    assert not {"max_model_len_oversized", "max_model_len_loose"} & _fired(fit)


def test_batched_tokens_too_small_for_the_prompts_without_chunked_prefill() -> None:
    cmd = (
        "vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len 8192 --no-enable-chunked-prefill "
        "--max-num-batched-tokens 4096"
    )
    diag = diagnose_config(cmd, "A100-80GB", input_len=6000, output_len=128)
    f = diag.finding("prompts_exceed_batch")
    assert f is not None and f.actions[0].id == "enable_chunked_prefill"
    with_chunks = diagnose_config(
        cmd.replace("--no-enable-chunked-prefill", "--enable-chunked-prefill"),
        "A100-80GB",
        input_len=6000,
        output_len=128,
    )
    assert "prompts_exceed_batch" not in _fired(with_chunks)


def test_a_long_whole_prefill_is_predicted_as_a_stall() -> None:
    cmd = "vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len 16384 --no-enable-chunked-prefill"
    diag = diagnose_config(cmd, "A100-80GB", input_len=12000, output_len=128)
    f = diag.finding("prefill_stall_ahead")
    assert f is not None
    assert f.figures["prefill_stall_ms"] > 500
    short = diagnose_config(cmd, "A100-80GB", input_len=500, output_len=128)
    assert "prefill_stall_ahead" not in _fired(short)


def test_requests_longer_than_max_model_len_are_refused() -> None:
    cmd = "vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len 4096"
    diag = diagnose_config(cmd, "A100-80GB", input_len=8000, output_len=512)
    f = diag.findings[0]
    assert f.rule == "workload_too_long"
    assert f.actions[0].to_value == 10240
    assert "workload_too_long" not in _fired(
        diagnose_config(cmd, "A100-80GB", input_len=2000, output_len=512)
    )


def test_a_cap_far_below_the_pool_is_pointed_out() -> None:
    cmd = "vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len 4096 --max-num-seqs 16"
    diag = diagnose_config(cmd, "A100-80GB", input_len=256, output_len=512)
    f = diag.finding("seq_cap_below_pool")
    assert f is not None and f.kind == "advisory"
    assert f.actions[0].id == "raise_max_num_seqs" and f.actions[0].cost_step == 2
    assert diag.healthy  # advice, not a fault
    big = diagnose_config(cmd.replace("16", "256"), "A100-80GB", input_len=2048, output_len=512)
    assert "seq_cap_below_pool" not in _fired(big)


def test_without_the_workload_the_doctor_says_what_it_cannot_check() -> None:
    diag = diagnose_config(SEED, "A100-80GB")
    unknown = [f for f in diag.findings if f.kind == "cannot_tell"]
    assert {f.rule for f in unknown} >= {"pool_below_batch", "workload_too_long"}
    assert all("workload's lengths are unknown" in f.missing[0] for f in unknown)
    assert diag.healthy
    assert "no problem ahead that the config alone shows" in diag.headline
    with pytest.raises(ConfigError, match="both"):
        diagnose_config(SEED, "A100-80GB", input_len=1024)


@pytest.mark.parametrize(
    "command",
    [
        SEED,
        "vllm serve Qwen/Qwen2.5-72B-Instruct",
        "vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len 4096 --no-enable-chunked-prefill",
        "vllm serve Qwen/Qwen2.5-7B-Instruct --gpu-memory-utilization 0.3 --max-num-seqs 16",
        "vllm serve Qwen/Qwen2.5-7B-Instruct --quantization fp8 --kv-cache-dtype fp8",
    ],
)
def test_no_doctor_template_is_left_unfilled(command: str) -> None:
    for lengths in ((None, None), (3000, 512)):
        diag = diagnose_config(command, "H100-SXM", input_len=lengths[0], output_len=lengths[1])
        for f in diag.findings:
            texts = [f.title, *f.evidence, *f.conditions, *f.missing]
            texts += [t for a in f.actions for t in (a.title, a.expected, a.risk)]
            for text in texts:
                assert "{" not in text and "}" not in text, text


def test_refusal_fixes_follow_the_reason_code_not_the_wording() -> None:
    from servetune.diagnose.doctor.refusal import _fix_candidates
    from servetune.sim.config import EngineConfig

    cfg = EngineConfig(
        model="Qwen/Qwen2.5-7B-Instruct",
        max_model_len=32768,
        max_num_batched_tokens=8192,
        enable_chunked_prefill=False,
    )
    err = SimError("whatever vLLM's next release prints", code="sim.batch_below_model_len")
    assert _fix_candidates(cfg, None, err)[:2] == [
        ("enable_chunked_prefill", True, 0),
        ("max_num_batched_tokens", 32768, 0),
    ]
    with pytest.raises(SimError) as real:
        cfg.resolve()
    assert real.value.code == "sim.batch_below_model_len"
