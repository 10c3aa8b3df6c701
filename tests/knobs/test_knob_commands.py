"""Configurations rendered as each engine's command line and read back; recorded command
lines of every engine read into knob values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from servetune.errors import ConfigError
from servetune.knobs import (
    ENGINES,
    Command,
    engine_knobs,
    knob,
    parse_command,
    render_args,
    render_command,
    render_value,
)
from servetune.profiles import profile

SAMPLE: dict[str, Any] = {
    "max_num_seqs": 64,
    "max_num_batched_tokens": 4096,
    "gpu_memory_utilization": 0.85,
    "max_model_len": 2048,
    "enable_chunked_prefill": False,
    "long_prefill_token_threshold": 512,
    "max_num_partial_prefills": 2,
    "enable_prefix_caching": False,
    "kv_cache_dtype": "fp8_e5m2",
    "quantization": "fp8",
    "dtype": "bfloat16",
    "tensor_parallel_size": 2,
    "pipeline_parallel_size": 2,
    "data_parallel_size": 2,
    "block_size": 32,
    "swap_space": 8.0,
    "enforce_eager": True,
    "cudagraph_capture_sizes": [1, 2, 4, 8],
    "max_cudagraph_capture_size": 8,
    "scheduling_policy": "fcfs",
    "ubatch_size": 256,
    "threads": 2,
    "flash_attn": True,
}
"""A value for every knob that each engine's spelling can carry back unchanged."""

VERSIONS = {
    "vllm": [None, "0.7.3", "0.8.4", "0.8.5", "0.9.2", "0.10.1", "0.11.0", "0.11.1"],
    "llama.cpp": [None, "b5000"],
}


def _sample_for(engine: str, version: str | None) -> dict[str, Any]:
    cfg = {k: v for k, v in SAMPLE.items() if k in engine_knobs(engine, version)}
    if engine == "tgi":
        cfg["kv_cache_dtype"] = "fp8_e4m3"
        cfg["dtype"] = "float16"
    if engine == "sim":
        cfg["block_size"] = 32
    if engine == "llama.cpp":
        cfg["kv_cache_dtype"] = "q8_0"
    if engine == "sglang":
        cfg["kv_cache_dtype"] = "fp8_e5m2"
    if engine == "trtllm":
        cfg["kv_cache_dtype"] = "fp8"
    return cfg


CASES = [(e, v) for e in ENGINES for v in VERSIONS.get(e, [None])]


@pytest.mark.parametrize(("engine", "version"), CASES)
def test_render_then_parse_gives_the_same_configuration(
    engine: str, version: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = _sample_for(engine, version)
    assert len(cfg) >= 5
    cmd = render_command(engine, "org/model", cfg, version)
    line = cmd.shell()
    if cmd.files:  # a YAML side file: written where the command line names it, then read
        monkeypatch.chdir(tmp_path)
        for name, text in cmd.files.items():
            (tmp_path / name).write_text(text)
        line = Command(cmd.argv, cmd.env).shell()
    back = parse_command(line, engine=engine)
    assert back.model == "org/model"
    # a switch left at its default and a feature turned on by default render nothing: both
    # come back as "unset", which is the same configuration for the engine
    expected = dict(cfg)
    for name, value in cfg.items():
        if render_value(engine, name, value, version) == "":
            expected.pop(name)
    assert back.values == expected, cmd.shell()
    standing = dict(profile(engine).launch.side_file_always)
    assert [i for i in back.ignored if i.split(":")[0] not in standing] == []


def test_vllm_command_line() -> None:
    cmd = render_command(
        "vllm",
        "Qwen/Qwen2.5-7B-Instruct",
        {"max_num_seqs": 128, "enable_chunked_prefill": False, "max_num_batched_tokens": 32768},
    )
    assert cmd.shell() == (
        "vllm serve Qwen/Qwen2.5-7B-Instruct --max-num-seqs 128 "
        "--max-num-batched-tokens 32768 --no-enable-chunked-prefill"
    )
    old = render_command("vllm", "m", {"enable_chunked_prefill": False}, "0.8.4")
    assert old.argv[-2:] == ["--enable-chunked-prefill", "False"]


def test_llama_cpp_context_is_per_slot_times_slots() -> None:
    args = render_args("llama.cpp", {"max_num_seqs": 4, "max_model_len": 2048}).args
    assert args == ["-np", "4", "-c", "8192"]
    with pytest.raises(ConfigError, match="needs max_num_seqs"):
        render_args("llama.cpp", {"max_model_len": 2048})
    parsed = parse_command("llama-server -m x.gguf -c 8192 --parallel 4 --port 1")
    assert parsed.values == {"max_num_seqs": 4, "max_model_len": 2048}
    assert parsed.ignored == ["--port 1"]
    one = parse_command("llama-server -m x.gguf -c 4096")
    assert one.values == {"max_model_len": 4096} and one.notes


def test_llama_cpp_flash_attention_by_build() -> None:
    assert render_args("llama.cpp", {"flash_attn": True}).args == ["-fa", "on"]
    assert render_args("llama.cpp", {"flash_attn": False}).args == ["-fa", "off"]
    assert render_args("llama.cpp", {"flash_attn": True}, "b5000").args == ["-fa"]
    assert parse_command("llama-server -m x -fa auto").values == {}
    assert parse_command("llama-server -m x -fa").values == {"flash_attn": True}


def test_engine_words_for_neutral_values() -> None:
    assert render_value("sglang", "kv_cache_dtype", "fp8") == "--kv-cache-dtype fp8_e5m2"
    assert render_value("llama.cpp", "kv_cache_dtype", "fp8") == "-ctk q8_0 -ctv q8_0"
    assert render_value("tgi", "enable_prefix_caching", False) == "PREFIX_CACHING=0"
    assert render_value("sglang", "enable_chunked_prefill", False) == "--chunked-prefill-size -1"
    assert render_value("sglang", "enable_prefix_caching", False) == "--disable-radix-cache"
    assert render_value("vllm", "enforce_eager", False) == ""
    with pytest.raises(ConfigError, match="engine tgi does not take kv_cache_dtype") as info:
        render_value("tgi", "kv_cache_dtype", "q4_0")
    assert info.value.code == "knob.value"


def test_tgi_environment_is_part_of_the_command() -> None:
    cmd = render_command("tgi", "org/m", {"enable_prefix_caching": False, "max_num_seqs": 8})
    assert cmd.env == {"PREFIX_CACHING": "0"}
    assert cmd.shell().startswith("PREFIX_CACHING=0 text-generation-launcher --model-id org/m")
    assert parse_command(cmd.shell()).values == {
        "enable_prefix_caching": False,
        "max_num_seqs": 8,
    }


@pytest.mark.parametrize(
    ("line", "engine", "values"),
    [
        (
            "CUDA_VISIBLE_DEVICES=0,1 vllm serve meta-llama/Llama-3.1-8B-Instruct "
            "--max_num_seqs=64 -tp 2 --enable-chunked-prefill false --port 8000 --api-key k",
            "vllm",
            {"max_num_seqs": 64, "tensor_parallel_size": 2, "enable_chunked_prefill": False},
        ),
        (
            "python3 -m vllm.entrypoints.openai.api_server --model m --enable-prefix-caching "
            "--no-enforce-eager --swap-space 4 --cuda-graph-sizes 1 2 4 --disable-log-requests",
            "vllm",
            {
                "enable_prefix_caching": True,
                "enforce_eager": False,
                "swap_space": 4.0,
                "cudagraph_capture_sizes": [1, 2, 4],
            },
        ),
        (
            "python -m sglang.launch_server --model-path m --tp-size 2 --mem-fraction-static "
            "0.8 --chunked-prefill-size 4096 --disable-radix-cache --enable-metrics",
            "sglang",
            {
                "tensor_parallel_size": 2,
                "gpu_memory_utilization": 0.8,
                "enable_chunked_prefill": True,
                "chunked_prefill_size": 4096,
                "enable_prefix_caching": False,
            },
        ),
        (
            "docker-entrypoint text-generation-launcher --model-id m",
            None,
            None,
        ),
        (
            "text-generation-launcher --model-id m --num-shard 4 --max-batch-prefill-tokens "
            "8192 --quantize awq --cuda-graphs 1,2,4",
            "tgi",
            {
                "tensor_parallel_size": 4,
                "max_num_batched_tokens": 8192,
                "quantization": "awq",
                "cudagraph_capture_sizes": [1, 2, 4],
            },
        ),
        (
            "/opt/llama/llama-server -m m.gguf -np 8 -c 16384 -b 1024 -ub 256 -t 4 "
            "-ctk q8_0 -ctv q8_0 --metrics --host 0.0.0.0",
            "llama.cpp",
            {
                "max_num_seqs": 8,
                "max_model_len": 2048,
                "max_num_batched_tokens": 1024,
                "ubatch_size": 256,
                "threads": 4,
                "kv_cache_dtype": "q8_0",
            },
        ),
        (
            "servetune sim serve --gpu H100-80GB --model Qwen2.5-7B-Instruct --max-num-seqs 32",
            "sim",
            {"max_num_seqs": 32},
        ),
    ],
)
def test_recorded_command_lines(
    line: str, engine: str | None, values: dict[str, Any] | None
) -> None:
    if engine is None:
        with pytest.raises(ConfigError) as info:
            parse_command(line)
        assert info.value.code == "knob.command"
        return
    parsed = parse_command(line)
    assert parsed.engine == engine
    assert parsed.values == values


def test_flags_alone_need_the_engine_or_mean_vllm() -> None:
    assert parse_command("--max-num-seqs 8").engine == "vllm"
    assert parse_command("-np 8", engine="llama.cpp").values == {"max_num_seqs": 8}
    assert parse_command("vllm serve m -tp 2", engine="vllm-cpu").engine == "vllm-cpu"
    with pytest.raises(ConfigError, match=r"not llama\.cpp's"):
        parse_command("vllm serve m", engine="llama.cpp")


def test_bad_values_name_the_flag() -> None:
    with pytest.raises(ConfigError, match="--max-num-seqs 'lots'") as info:
        parse_command("vllm serve m --max-num-seqs lots")
    assert info.value.code == "knob.value"
    with pytest.raises(ConfigError, match="needs a value"):
        parse_command("vllm serve m --max-num-seqs")


def test_every_knob_names_what_the_planner_does() -> None:
    for name in engine_knobs("sim"):
        assert knob(name).planner != ("none",) or name in (
            "long_prefill_token_threshold",
            "enable_prefix_caching",
            "async_scheduling",
            "schedule_conservativeness",
        )


@pytest.mark.parametrize("line", ["vllm serve 'unterminated", "vllm serve Qwen --flag \\"])
def test_a_line_that_cannot_be_split_is_a_config_error(line: str) -> None:
    """An unclosed quote was shlex's ValueError: a traceback from diagnose and watch
    --server-cmd."""
    with pytest.raises(ConfigError) as err:
        parse_command(line)
    assert err.value.code == "knob.command"
    assert "cannot be split into words" in err.value.message and err.value.hint


@pytest.mark.parametrize("value", ["nan", "inf", float("nan")])
def test_a_float_knob_is_a_finite_number(value: object) -> None:
    """gpu_memory_utilization=nan passed the range check (NaN compares false with both
    bounds): `engine cmd --gpu-memory-utilization nan` printed it, tune --fix took it."""
    from servetune.knobs.registry import check_value

    with pytest.raises(ConfigError) as err:
        check_value("gpu_memory_utilization", value)
    assert err.value.code == "knob.value" and "a finite number" in err.value.message
