"""The ``python -m sglang.launch_server`` line the simulator renders for SGLang's semantics,
read back by SGLang's own argument definitions (SGLang cannot be installed here: its 0.5.23
parser's options, dumped from the PyPI wheel, are ``tests/data/sglang/server_args_0.5.23.json``
— flags, store/store_true, types, choices — and rebuilt as an argparse parser that refuses
abbreviations and unknown flags)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from servetune.knobs import parse_command
from servetune.sim.config import EngineConfig

DUMP = Path(__file__).resolve().parents[1] / "data" / "sglang" / "server_args_0.5.23.json"


def _int(text: str) -> int:
    return int(text)


_TYPES: dict[str | None, Any] = {
    "int": _int,
    "float": float,
    "human_readable_int": _int,
    None: None,
}


def sglang_parser() -> argparse.ArgumentParser:
    data = json.loads(DUMP.read_text("utf-8"))
    p = argparse.ArgumentParser(allow_abbrev=False, exit_on_error=False, add_help=False)
    for a in data["arguments"]:
        kw: dict[str, Any] = {"dest": a["dest"]}
        if a["kind"] == "store_true":
            kw["action"] = "store_true"
        else:
            kw["type"] = _TYPES.get(a["type"], str)
            if a["nargs"] is not None:
                kw["nargs"] = a["nargs"]
            if a["choices"] and a["type"] in (None, "str"):
                kw["choices"] = a["choices"]
        p.add_argument(*a["flags"], **kw)
    return p


def parsed(cfg: EngineConfig) -> argparse.Namespace:
    argv = cfg.launch_command()
    assert argv[:3] == ["python", "-m", "sglang.launch_server"]
    ns, unknown = sglang_parser().parse_known_args(argv[3:])
    assert unknown == [], unknown
    return ns


def test_dense_defaults_resolved() -> None:
    cfg = EngineConfig(engine="sglang", gpu="H100-SXM", model="Llama-3.1-8B")
    r = cfg.resolve()
    ns = parsed(cfg)
    assert ns.model_path == "meta-llama/Llama-3.1-8B-Instruct"
    assert ns.tp_size == 1
    assert ns.mem_fraction_static == r.gpu_memory_utilization
    assert ns.max_running_requests == r.max_num_seqs
    assert ns.max_prefill_tokens == 16384
    assert ns.chunked_prefill_size == r.chunked_prefill_size == 8192
    assert ns.cuda_graph_max_bs_decode == r.max_cudagraph_capture_size == 256
    assert ns.context_length == 131072
    assert not ns.disable_radix_cache and not ns.disable_overlap_schedule


def test_moe_with_dp_attention_and_ep() -> None:
    cfg = EngineConfig(
        engine="sglang",
        gpu="H200",
        model="deepseek-ai/DeepSeek-R1",
        tensor_parallel_size=8,
        data_parallel_size=8,
        enable_dp_attention=True,
        expert_parallel_size=8,
    )
    ns = parsed(cfg)
    assert ns.model_path == "deepseek-ai/DeepSeek-R1"
    assert (ns.tp_size, ns.dp_size, ns.ep_size) == (8, 8, 8)
    assert ns.enable_dp_attention is True
    assert ns.chunked_prefill_size == 8192 // 8  # SGLang divides the chunk by --dp
    assert ns.max_running_requests == cfg.resolve().max_num_seqs * 8


def test_every_knob_off_its_default() -> None:
    cfg = EngineConfig(
        engine="sglang",
        gpu="H100-SXM",
        model="Qwen/Qwen3-235B-A22B",  # 16-bit, quantized online: the flag is rendered
        quantization="fp8",
        tensor_parallel_size=4,
        gpu_memory_utilization=0.9,
        enable_prefix_caching=False,
        async_scheduling=False,
        block_size=16,
        kv_cache_dtype="fp8",
        chunked_prefill_size=4096,
        schedule_conservativeness=0.5,
        max_num_seqs=256,
        max_num_batched_tokens=8192,
        max_model_len=32768,
        max_cudagraph_capture_size=64,
    )
    ns = parsed(cfg)
    assert ns.quantization == "fp8"
    assert ns.mem_fraction_static == 0.9
    assert ns.disable_radix_cache and ns.disable_overlap_schedule
    assert ns.page_size == 16
    assert ns.kv_cache_dtype == "fp8_e5m2"
    assert ns.chunked_prefill_size == 4096
    assert ns.schedule_conservativeness == 0.5
    assert (ns.max_running_requests, ns.max_prefill_tokens, ns.context_length) == (256, 8192, 32768)
    assert ns.cuda_graph_max_bs_decode == 64


def test_chunked_prefill_off_is_minus_one() -> None:
    cfg = EngineConfig(
        engine="sglang", gpu="A100-80GB", model="Qwen2.5-7B-Instruct", enable_chunked_prefill=False
    )
    assert parsed(cfg).chunked_prefill_size == -1
    assert cfg.resolve().chunked_prefill_size == -1


def test_the_line_reads_back_into_the_same_knobs() -> None:
    cfg = EngineConfig(
        engine="sglang",
        gpu="H100-SXM",
        model="Qwen3-8B",
        chunked_prefill_size=2048,
        enable_prefix_caching=False,
    )
    back = parse_command(cfg.launch_command())
    assert back.engine == "sglang"
    assert back.values["chunked_prefill_size"] == 2048
    assert back.values["enable_chunked_prefill"] is True
    assert back.values["enable_prefix_caching"] is False
    assert back.values["gpu_memory_utilization"] == cfg.resolve().gpu_memory_utilization


def test_older_release_spelling() -> None:
    """Before the per-phase CUDA-graph flags, the largest batch was --cuda-graph-max-bs."""
    argv = EngineConfig(
        engine="sglang", gpu="H100-SXM", model="Qwen3-8B", sglang_version="0.4.6"
    ).launch_command()
    assert argv[argv.index("--cuda-graph-max-bs") + 1] == "160"
    assert (
        "--mem-fraction-static" in argv and argv[argv.index("--mem-fraction-static") + 1] == "0.88"
    )


def test_the_dump_is_sglangs_parser() -> None:
    p = sglang_parser()
    _, unknown = p.parse_known_args(["--model-path", "m", "--no-such-flag-anywhere", "1"])
    assert unknown == ["--no-such-flag-anywhere", "1"]
    with pytest.raises(argparse.ArgumentError):
        p.parse_args(["--model-path", "m", "--kv-cache-dtype", "fp8"])  # SGLang says fp8_e5m2
