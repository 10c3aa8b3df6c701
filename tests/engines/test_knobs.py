"""The knob map: each engine's spelling of the engine-neutral knobs, and what it lacks."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from servetune.engines import ENGINE_NAMES, KNOB_FLAGS, KNOB_NAMES, EngineKnobs, knob_flag
from servetune.engines.knobs import knob_note, require_flag
from servetune.errors import ConfigError, ServetuneError


def test_every_engine_maps_every_knob() -> None:
    assert set(ENGINE_NAMES) == {"vllm", "vllm-cpu", "sim", "sglang", "tgi", "llama.cpp"}
    for engine, flags in KNOB_FLAGS.items():
        assert tuple(flags) == KNOB_NAMES, engine


@pytest.mark.parametrize(
    ("engine", "knob", "flag"),
    [
        ("vllm", "max_num_seqs", "--max-num-seqs"),
        ("vllm", "gpu_memory_utilization", "--gpu-memory-utilization"),
        ("llama.cpp", "max_num_seqs", "-np"),
        ("llama.cpp", "max_model_len", "-c"),
        ("llama.cpp", "max_num_batched_tokens", "-b"),
        ("sglang", "max_num_seqs", "--max-running-requests"),
        ("sglang", "gpu_memory_utilization", "--mem-fraction-static"),
        ("sglang", "tensor_parallel_size", "--tp-size"),
        ("tgi", "max_num_batched_tokens", "--max-batch-prefill-tokens"),
        ("tgi", "tensor_parallel_size", "--num-shard"),
        ("tgi", "quantization", "--quantize"),
        ("sim", "max_num_seqs", "--max-num-seqs"),
        ("vllm", "long_prefill_token_threshold", "--long-prefill-token-threshold"),
        ("vllm-cpu", "long_prefill_token_threshold", "--long-prefill-token-threshold"),
        ("sim", "long_prefill_token_threshold", "--long-prefill-token-threshold"),
    ],
)
def test_knob_flag(engine: str, knob: str, flag: str) -> None:
    assert knob_flag(engine, knob) == flag


@pytest.mark.parametrize(
    ("engine", "knob"),
    [
        ("llama.cpp", "gpu_memory_utilization"),
        ("llama.cpp", "quantization"),
        ("llama.cpp", "tensor_parallel_size"),
        ("llama.cpp", "chunked_prefill"),
        ("tgi", "chunked_prefill"),
        ("sglang", "long_prefill_token_threshold"),
        ("tgi", "long_prefill_token_threshold"),
        ("llama.cpp", "long_prefill_token_threshold"),
    ],
)
def test_a_knob_an_engine_lacks(engine: str, knob: str) -> None:
    assert knob_flag(engine, knob) is None
    with pytest.raises(ConfigError) as info:
        require_flag(engine, knob)
    assert engine in info.value.message and knob in info.value.message
    assert info.value.hint


def test_llama_cpp_context_note_says_how_max_model_len_maps() -> None:
    note = knob_note("llama.cpp", "max_model_len")
    assert note is not None and "-np" in note and "max_num_seqs" in note


def test_unknown_engine_and_knob() -> None:
    with pytest.raises(ServetuneError, match="unknown engine 'trt'"):
        knob_flag("trt", "max_num_seqs")
    with pytest.raises(ServetuneError, match="unknown knob 'batch'"):
        knob_flag("vllm", "batch")


def test_knobs_model_validates() -> None:
    k = EngineKnobs(max_num_seqs=8, chunked_prefill=False)
    assert k.given() == {"max_num_seqs": 8, "chunked_prefill": False}
    with pytest.raises(ValidationError):
        EngineKnobs(max_num_seqs=0)
    with pytest.raises(ValidationError):
        EngineKnobs(gpu_memory_utilization=1.5)
    with pytest.raises(ValidationError):
        EngineKnobs(max_num_seq=8)  # type: ignore[call-arg]
