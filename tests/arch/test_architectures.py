"""The architecture description against the model cards and the engines' own formulas."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from servetune.arch.architecture import Architecture
from servetune.arch.families import read_config
from servetune.arch.flops import model_flops, windowed_mean
from servetune.arch.models import card_counts, find_model, model_from_hf_config, models
from servetune.errors import SimError

DATA = Path(__file__).parent / "data"
CARDED = [m.name for m in models() if card_counts(m.name) is not None]


@pytest.mark.parametrize("name", CARDED)
def test_parameter_counts_match_the_model_card(name: str) -> None:
    m = find_model(name)
    card = card_counts(name)
    assert card is not None
    total = m.param_count_of(mtp=bool(card.mtp_included))
    assert card.within(total, card.total_params, card.rounded_to), (total, card.total_params)
    if card.active_params is not None:
        active = m.active_param_count - (
            m.embedding_params if card.active_excludes_embedding else 0
        )
        assert card.within(active, card.active_params, card.active_rounded_to), (
            active,
            card.active_params,
        )
    if card.non_embedding_params is not None:
        non_emb = m.param_count_of(mtp=False) - m.embedding_params - m.head_params
        assert card.within(non_emb, card.non_embedding_params, card.rounded_to)


def test_at_least_the_2026_families_are_in_the_catalog() -> None:
    families = {m.family for m in models()}
    assert {"deepseek_v3", "gpt_oss", "qwen3_moe", "mixtral", "llama4_text"} <= families
    moe = [m for m in models() if m.is_moe]
    assert len(moe) >= 9


def test_deepseek_v3_mla_kv_is_the_latent_on_every_rank() -> None:
    """vLLM's MLA cache: kv_lora_rank + qk_rope_head_dim = 576 elements per layer per token,
    not split by tensor parallelism (every rank holds the whole latent)."""
    m = find_model("deepseek-ai/DeepSeek-R1")
    assert m.mla is not None and m.mla.latent_dim == 576
    assert m.kv_bytes_per_token(2.0) == 61 * 576 * 2 == 70_272
    assert m.kv_bytes_per_token(2.0, tp=8) == 70_272
    assert m.kv_bytes_per_token(1.0, tp=8) == 61 * 576
    assert m.mtp_layers == 1 and m.moe is not None
    assert m.moe.dense_layers == (0, 1, 2) and m.moe_layer_count == 58
    assert m.checkpoint_quantization == "fp8"


def test_gqa_kv_heads_split_then_replicated_under_tp() -> None:
    """K and V of this rank's KV heads; past the KV head count each rank keeps one."""
    m = find_model("Qwen/Qwen3-30B-A3B")  # 4 KV heads of 128, 48 layers
    assert m.kv_bytes_per_token(2.0) == 2 * 48 * 4 * 128 * 2
    assert m.kv_bytes_per_token(2.0, tp=2) == 2 * 48 * 2 * 128 * 2
    assert m.kv_bytes_per_token(2.0, tp=8) == 2 * 48 * 1 * 128 * 2


def test_gpt_oss_alternates_sliding_and_full_layers() -> None:
    m = find_model("openai/gpt-oss-120b")
    assert m.attention_counts == {"full": 18, "sliding": 18, "chunked": 0}
    assert m.sliding_window == 128 and m.attention_sinks
    per_kind = m.kv_elements_per_token()
    assert per_kind["full"] == per_kind["sliding"] == 18 * 2 * 8 * 64
    assert m.checkpoint_quantization == "mxfp4" and m.quantization_scope == "experts"
    assert m.moe is not None and m.moe.experts_per_token == 4 and m.moe.num_experts == 128


def test_llama4_chunked_layers_and_interleaved_experts() -> None:
    scout = find_model("Llama-4-Scout-17B-16E-Instruct")
    maverick = find_model("Llama-4-Maverick-17B-128E-Instruct")
    assert scout.attention_counts["chunked"] == 36 and scout.attention_chunk_size == 8192
    assert scout.moe_layer_count == 48
    assert maverick.moe_layer_count == 24  # every other layer (interleave_moe_layer_step 2)
    assert scout.vision_params > 0


@pytest.mark.parametrize(
    ("file", "what"),
    [
        ("Qwen__Qwen3-Next-80B-A3B-Thinking.json", "linear attention"),
        ("deepseek-ai__DeepSeek-V3.2.json", "Sparse Attention"),
    ],
)
def test_an_unmodelled_family_is_refused_naming_what_is_missing(file: str, what: str) -> None:
    with pytest.raises(SimError) as info:
        model_from_hf_config(DATA / file)
    assert info.value.code == "sim.unmodelled_family"
    assert what in info.value.message
    assert "does not model" in info.value.message


def test_an_unknown_moe_family_is_refused_not_read_as_dense(tmp_path: Path) -> None:
    cfg = json.loads((DATA / "Qwen__Qwen3-Next-80B-A3B-Thinking.json").read_text())
    cfg["model_type"] = "brand_new_moe"
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(SimError) as info:
        model_from_hf_config(path)
    assert info.value.code == "sim.unmodelled_family"
    assert "mixture-of-experts" in info.value.message


def test_a_layer_kind_the_simulator_lacks_is_refused() -> None:
    cfg = {
        "model_type": "llama",
        "num_hidden_layers": 2,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "intermediate_size": 128,
        "vocab_size": 100,
        "layer_types": ["full_attention", "linear_attention"],
    }
    with pytest.raises(SimError, match="linear_attention"):
        read_config(cfg, "x", "test")


def test_mla_attention_flops_absorbed_in_decode() -> None:
    """Decode with absorbed weights: per context token and head 2·(latent + rope) for QKᵀ
    and 2·latent for AV; prefill as multi-head attention: 2·(qk_head + v_head)."""
    m = find_model("deepseek-ai/DeepSeek-V3")
    n, layers = 128, 61
    assert m.attention_flops_per_ctx(decode=True)["full"] == layers * 2 * n * (576 + 512)
    assert m.attention_flops_per_ctx(decode=False)["full"] == layers * 2 * n * (192 + 128)


def test_windowed_flops_use_the_window() -> None:
    assert windowed_mean(1000, 200, None) == (500, 1100)
    assert windowed_mean(1000, 200, 128) == (128, 128)
    m = find_model("openai/gpt-oss-20b")
    f = model_flops(m)
    prompt, gen = f.per_token(4096, 256)
    full = m.attention_flops_per_ctx(decode=True)["full"]
    sliding = m.attention_flops_per_ctx(decode=True)["sliding"]
    head = 2.0 * m.hidden_size * m.vocab_size
    assert gen == pytest.approx(f.linear + head + full * (4096 + 128) + sliding * 128)
    assert prompt == pytest.approx(f.linear + full * 2048 + sliding * 128)


def test_dense_models_are_unchanged() -> None:
    """The dense catalog's arithmetic is what it was (Llama-3.1-8B: 8,030,261,248)."""
    m = find_model("meta-llama/Llama-3.1-8B-Instruct")
    assert m.param_count == 8_030_261_248
    assert m.active_param_count == m.param_count
    assert m.kv_bytes_per_token(2.0) == 131_072
    assert not m.is_moe and m.layer_types == ()


def test_architecture_checks_its_own_consistency() -> None:
    base = find_model("meta-llama/Llama-3.1-8B-Instruct").model_dump()
    with pytest.raises(ValueError, match="layer_types"):
        Architecture.model_validate({**base, "layer_types": ("full",)})
    with pytest.raises(ValueError, match="sliding_window"):
        Architecture.model_validate({**base, "layer_types": ("sliding",) * 32})
    assert math.isclose(find_model("Mixtral-8x7B").active_param_count / 1e9, 12.88, abs_tol=0.01)


def test_serving_a_checkpoint_in_its_own_format_is_not_a_requantization() -> None:
    from servetune.arch.precision import requantized

    assert not requantized("mxfp4", "mxfp4")
    assert not requantized("fp8", None)
    assert requantized(None, "fp8")
    assert requantized(None, "awq_marlin")
    assert not requantized("nvfp4", "modelopt_fp4")


def test_an_alias_naming_a_quantized_checkpoint_loads_in_its_format() -> None:
    """Qwen/Qwen3-30B-A3B-FP8 is the 16-bit entry's architecture published in FP8: served
    as FP8 without --quantization, as vLLM reads it from the checkpoint."""
    assert find_model("Qwen/Qwen3-30B-A3B").checkpoint_quantization is None
    assert find_model("Qwen/Qwen3-30B-A3B-FP8").checkpoint_quantization == "fp8"
    assert find_model("RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic").checkpoint_quantization == (
        "fp8"
    )
    assert find_model("openai/gpt-oss-120b").checkpoint_quantization == "mxfp4"
