"""Catalog look-ups, vLLM's defaults, bad input and the memory planner against vLLM logs."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from servetune.arch.gpus import find_gpu
from servetune.arch.models import find_model, model_from_hf_config
from servetune.errors import SimError
from servetune.sim.config import EngineConfig, refusal
from servetune.sim.memory import plan_memory


def test_lookup_by_alias_and_hf_id_last_part() -> None:
    assert find_gpu("a100").name == "A100-80GB"
    assert find_gpu("H100 SXM").name == "H100-SXM"
    assert find_model("Qwen2.5-7B-Instruct").name == "Qwen/Qwen2.5-7B-Instruct"
    assert find_model("meta-llama/Llama-3.1-8B-Instruct").num_hidden_layers == 32


def test_param_counts_match_the_seed_catalog() -> None:
    assert find_model("Llama-3.1-8B-Instruct").param_count == 8_030_261_248
    assert find_model("Qwen2.5-7B-Instruct").param_count == 7_615_616_512


@pytest.mark.parametrize(
    "field,value,words",
    [
        ("gpu", "A100-90GB", "did you mean A100-80GB"),
        ("model", "Qwen2.5-7B-Instrct", "did you mean Qwen/Qwen2.5-7B-Instruct"),
    ],
)
def test_unknown_names_suggest_close_ones(field: str, value: str, words: str) -> None:
    with pytest.raises(SimError) as e:
        EngineConfig(**{field: value}).resolve()
    assert words in (e.value.hint or "")


def test_vllm_v1_defaults_depend_on_the_gpu() -> None:
    a100 = EngineConfig(gpu="A100-80GB").resolve()
    assert (a100.max_num_batched_tokens, a100.max_num_seqs) == (2048, 256)
    h100 = EngineConfig(gpu="H100-SXM").resolve()
    assert (h100.max_num_batched_tokens, h100.max_num_seqs) == (8192, 1024)
    l4 = EngineConfig(gpu="L4", max_model_len=4096).resolve()
    assert (l4.max_num_batched_tokens, l4.max_num_seqs) == (2048, 256)
    assert a100.enable_chunked_prefill and a100.enable_prefix_caching
    assert a100.max_model_len == 32768  # the model's max_position_embeddings
    off = EngineConfig(enable_chunked_prefill=False, max_model_len=16384).resolve()
    assert off.max_num_batched_tokens == 16384


def test_batched_tokens_below_max_model_len_without_chunking_is_refused() -> None:
    with pytest.raises(SimError, match="is smaller than max_model_len") as e:
        EngineConfig(
            enable_chunked_prefill=False, max_num_batched_tokens=8192, max_model_len=32768
        ).resolve()
    # the library names the fields; the CLI the flags that set them
    assert "raise max_num_batched_tokens to ≥ 32768" in (e.value.hint or "")
    assert "--" not in (e.value.hint or "")
    _, hint = e.value.shown(lambda f: "--" + f.replace("_", "-"))
    assert hint is not None and "raise --max-num-batched-tokens to ≥ 32768" in hint


def test_tp_must_divide_the_heads() -> None:
    with pytest.raises(SimError, match="divisible by tensor parallel size") as e:
        EngineConfig(model="Qwen2.5-7B-Instruct", tensor_parallel_size=3).resolve()
    assert "choose a tensor_parallel_size that divides 28" in (e.value.hint or "")


@pytest.mark.parametrize("util", [0.0, -0.1, 1.2, float("nan")])
def test_utilisation_outside_its_range_is_refused_by_the_model(util: float) -> None:
    with pytest.raises(ValidationError, match="gpu_memory_utilization"):
        EngineConfig(gpu_memory_utilization=util)
    # a copy made with model_copy skips the model's checks: resolving checks them again
    copy = EngineConfig().model_copy(update={"gpu_memory_utilization": util})
    with pytest.raises(
        SimError, match=r"gpu_memory_utilization must be (in \[0.05, 1\]|a fin)"
    ) as e:
        copy.resolve()
    assert e.value.code == "sim.config"


@pytest.mark.parametrize(
    ("kw", "words"),
    [
        ({"max_num_seqs": 0}, r"max_num_seqs must be ≥ 1 \(got 0\)"),
        ({"max_num_batched_tokens": -5}, "max_num_batched_tokens must be ≥ 1"),
        ({"max_model_len": 0}, "max_model_len must be ≥ 1"),
        ({"tensor_parallel_size": 0}, "tensor_parallel_size must be ≥ 1"),
        ({"data_parallel_size": 0}, "data_parallel_size must be ≥ 1"),
        ({"block_size": 12}, "block_size must be one of 1, 8, 16, 32, 64, 128"),
        ({"long_prefill_token_threshold": -1}, "long_prefill_token_threshold must be ≥ 0"),
        ({"interconnect_gb_s": 0.0}, "interconnect_gb_s must be > 0"),
        ({"chunked_prefill_size": 4096}, "chunked_prefill_size: SGLang's knob"),
        ({"sglang_version": "0.4.6"}, "sglang_version applies to SGLang's semantics"),
        ({"engine": "sglang", "data_parallel_size": 2}, "without enable_dp_attention"),
        (
            {"engine": "sglang", "tensor_parallel_size": 4, "expert_parallel_size": 3},
            "expert_parallel_size 3 must divide tensor_parallel_size 4",
        ),
        ({"engine": "sglang", "schedule_conservativeness": -1.0}, "must be ≥ 0"),
    ],
)
def test_the_model_checks_ranges_and_rules_in_python(kw: dict[str, object], words: str) -> None:
    with pytest.raises(ValidationError) as e:
        EngineConfig(**kw)  # type: ignore[arg-type]
    err = refusal(e.value)
    assert re.search(words, err.message), err.message
    assert "--" not in err.message + (err.hint or "")


@pytest.mark.parametrize(
    "util,tp,tokens",
    [
        (0.25, 1, 93_872),
        (0.5, 1, 464_848),
        (0.25, 2, 450_192),
        (0.5, 2, 1_192_160),
    ],
)
def test_kv_cache_tokens_within_3_percent_of_vllm_logs(util: float, tp: int, tokens: int) -> None:
    # published_cases.json kv-dl-qwen2-7b-* (vLLM 0.10.1.1 start-up logs, A100 80GB)
    mem = plan_memory(
        EngineConfig(
            model="Qwen/Qwen2-7B-Instruct",
            gpu_memory_utilization=util,
            tensor_parallel_size=tp,
            max_model_len=16384,
        ),
        "0.10.1.1",
    )
    assert abs(mem.kv_cache_tokens - tokens) / tokens < 0.03
    assert "Maximum concurrency for 16,384 tokens per request" in mem.log_lines()[4]


def test_the_seeds_oom_row_is_reproduced() -> None:
    # kv-3090-llama31-8b: max_model_len 20000 starts with ~1952 blocks, 29000 refuses
    ok = plan_memory(
        EngineConfig(
            gpu="RTX-3090",
            model="Llama-3.1-8B-Instruct",
            max_model_len=20000,
            enable_chunked_prefill=False,
        ),
        "v0",
    )
    assert abs(ok.num_gpu_blocks - 1952) / 1952 < 0.03
    with pytest.raises(SimError, match="max seq len \\(29000\\)") as e:
        plan_memory(
            EngineConfig(
                gpu="RTX-3090",
                model="Llama-3.1-8B-Instruct",
                max_model_len=29000,
                enable_chunked_prefill=False,
            ),
            "v0",
        )
    assert "lower max_model_len" in (e.value.hint or "")  # the field; the CLI its flag


def test_too_high_utilisation_refuses_to_start() -> None:
    with pytest.raises(SimError) as e:
        plan_memory(EngineConfig(gpu_memory_utilization=0.999))
    assert "lower gpu_memory_utilization" in (e.value.hint or "")
    shown = e.value.shown(lambda f: "--" + f.replace("_", "-"))[1] or ""
    assert "lower --gpu-memory-utilization" in shown


def test_weights_that_do_not_fit_refuse_with_the_knob() -> None:
    with pytest.raises(SimError, match="out of memory") as e:
        plan_memory(EngineConfig(gpu="L4", model="Llama-3.1-70B-Instruct", max_model_len=4096))
    assert "raise tensor_parallel_size" in (e.value.hint or "")


def test_fp8_kv_and_shorter_context_give_more_blocks() -> None:
    base = plan_memory(EngineConfig(max_model_len=32768))
    fp8 = plan_memory(EngineConfig(max_model_len=32768, kv_cache_dtype="fp8"))
    assert fp8.num_gpu_blocks > 1.9 * base.num_gpu_blocks
    awq = plan_memory(EngineConfig(max_model_len=32768, quantization="awq"))
    assert awq.num_gpu_blocks > base.num_gpu_blocks


def test_model_from_a_local_hf_config(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "config.json").write_text(
        '{"num_hidden_layers": 2, "hidden_size": 128, "num_attention_heads": 2, '
        '"intermediate_size": 256, "vocab_size": 1000, "max_position_embeddings": 2048}'
    )
    m = model_from_hf_config(tmp_path)
    assert m.head_dim == 64 and m.num_key_value_heads == 2
    assert plan_memory(EngineConfig(model=str(tmp_path), max_model_len=2048)).num_gpu_blocks > 0
