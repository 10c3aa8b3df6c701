"""Reading a Hugging Face ``config.json`` into an
:class:`~servetune.arch.architecture.Architecture`.

One reader per family (:data:`READERS`, keyed by ``model_type``): the dense Llama-style
families, Qwen2/Qwen3 MoE, Mixtral, DeepSeek-V2/V3 and Kimi-K2 (MLA + MoE + MTP), gpt-oss (MoE
with alternating sliding-window layers and sinks), Llama-4 (MoE, chunked local attention),
GLM-4.5 (MoE + MTP), Gemma-3 (5:1 local/global). A family the simulator does not model is
refused by :data:`UNMODELLED` with what it lacks — never read as something it is not.

The checkpoint's own quantization (``quantization_config``) is read too: gpt-oss ships MXFP4
experts, DeepSeek-V3 FP8 blocks; it is what vLLM and SGLang load unless told otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from servetune.arch.architecture import Architecture, AttentionKind, Mla, Moe
from servetune.errors import SimError

Config = dict[str, Any]

UNMODELLED: dict[str, str] = {
    "qwen3_next": "hybrid linear attention (Gated DeltaNet layers with a recurrent state, "
    "interleaved 3:1 with gated full attention)",
    "deepseek_v32": "DeepSeek Sparse Attention (a lightning indexer choosing index_topk "
    "tokens per query, with its own key cache)",
    "mamba": "state-space layers (no KV cache; a recurrent state per request)",
    "mamba2": "state-space layers (no KV cache; a recurrent state per request)",
    "jamba": "hybrid Mamba/attention layers (a recurrent state per request)",
    "falcon_h1": "hybrid Mamba-2/attention layers (a recurrent state per request)",
    "nemotron_h": "hybrid Mamba-2/attention layers (a recurrent state per request)",
    "granitemoehybrid": "hybrid Mamba-2/attention layers (a recurrent state per request)",
    "minimax": "lightning (linear) attention layers",
    "minimax_m1": "lightning (linear) attention layers",
    "rwkv": "RWKV recurrence (no attention)",
    "recurrent_gemma": "Griffin recurrent blocks",
    "bailing_moe_linear": "hybrid linear attention",
    "t5": "an encoder-decoder model",
    "bart": "an encoder-decoder model",
    "whisper": "an encoder-decoder speech model",
}
"""model_type → what the simulator would need and does not have."""

_LAYER_KINDS: dict[str, AttentionKind] = {
    "full_attention": "full",
    "sliding_attention": "sliding",
    "chunked_attention": "chunked",
}


class ConfigReadError(SimError):
    """A config.json the simulator cannot read or does not model."""

    default_code = "sim.catalog"


def _int(cfg: Config, *keys: str, default: int | None = None) -> int:
    for k in keys:
        v = cfg.get(k)
        if v is not None:
            return int(v)
    if default is not None:
        return default
    raise KeyError(keys[0])


def _layer_types(cfg: Config, layers: int) -> tuple[AttentionKind, ...]:
    raw = cfg.get("layer_types")
    if not raw:
        return ()
    kinds: list[AttentionKind] = []
    for t in raw:
        if t not in _LAYER_KINDS:
            raise ConfigReadError(
                f"layer type {t!r} is not one the simulator models",
                hint="the simulator models full, sliding-window and chunked attention layers",
            )
        kinds.append(_LAYER_KINDS[t])
    if len(kinds) != layers:
        raise KeyError("layer_types")
    return tuple(kinds) if any(k != "full" for k in kinds) else ()


def _checkpoint_quantization(cfg: Config) -> tuple[str | None, str]:
    """(format, scope) of the checkpoint's weights: scope "experts" when only the experts
    are quantized (gpt-oss's MXFP4 leaves attention, router and embeddings in BF16)."""
    q = cfg.get("quantization_config")
    if not isinstance(q, dict):
        return None, "all"
    method = str(q.get("quant_method") or "").lower()
    fmt = {
        "mxfp4": "mxfp4",
        "fp8": "fp8",
        "compressed-tensors": None,
        "modelopt": None,
        "awq": "awq",
        "gptq": "gptq",
    }.get(method)
    if method == "compressed-tensors":
        fmt = _compressed_tensors_format(q)
    if method in ("modelopt", "modelopt_fp4"):
        algo = str(q.get("quant_algo") or q.get("quantization", {}).get("quant_algo") or "")
        fmt = "nvfp4" if "FP4" in algo.upper() else "fp8" if "FP8" in algo.upper() else None
    if fmt is None:
        return None, "all"
    skip = [str(m) for m in q.get("modules_to_not_convert") or []]
    scope = "experts" if any("self_attn" in m for m in skip) else "all"
    return fmt, scope


def _compressed_tensors_format(q: Config) -> str | None:
    groups = q.get("config_groups") or {}
    for g in groups.values() if isinstance(groups, dict) else []:
        w = g.get("weights") or {}
        bits, kind = w.get("num_bits"), str(w.get("type") or "")
        if bits == 8 and kind == "float":
            return "fp8"
        if bits == 4 and kind == "float":
            return "nvfp4"
        if bits == 4 and kind == "int":
            return "gptq"
    return None


def _rope_positions(cfg: Config) -> int:
    """Positions of the rotary table vLLM precomputes for this config (``get_rope``): plain
    and Llama-3 scaling cache ``max_position_embeddings``; linear and dynamic-NTK scaling
    that times the factor; YaRN (and DeepSeek's YaRN) ``original_max_position_embeddings``
    times the factor. 0: none read (the ``max_position_embeddings``)."""
    scaling = cfg.get("rope_scaling") or cfg.get("rope_parameters")
    if not isinstance(scaling, dict):
        return 0
    kind = str(scaling.get("rope_type") or scaling.get("type") or "default").lower()
    try:
        factor = float(scaling.get("factor") or 1.0)
        top = int(cfg.get("max_position_embeddings") or 0)
        original = int(scaling.get("original_max_position_embeddings") or top)
    except (TypeError, ValueError):
        return 0
    if kind in ("linear", "dynamic"):
        return int(top * factor)
    if kind in ("yarn", "deepseek_yarn"):
        return int(original * factor)
    return 0


def _base(cfg: Config, name: str, source: str, family: str) -> dict[str, Any]:
    """The fields every family has."""
    heads = _int(cfg, "num_attention_heads")
    hidden = _int(cfg, "hidden_size")
    layers = _int(cfg, "num_hidden_layers")
    quant, scope = _checkpoint_quantization(cfg)
    return {
        "name": name,
        "family": family,
        "num_hidden_layers": layers,
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_key_value_heads": _int(cfg, "num_key_value_heads", default=heads),
        "head_dim": _int(cfg, "head_dim", default=hidden // heads),
        "intermediate_size": _int(cfg, "intermediate_size", default=0),
        "vocab_size": _int(cfg, "vocab_size"),
        "tie_word_embeddings": bool(cfg.get("tie_word_embeddings", False)),
        "max_position_embeddings": _int(cfg, "max_position_embeddings", default=4096),
        "attention_bias": bool(cfg.get("attention_bias", False)),
        "layer_types": _layer_types(cfg, layers),
        "sliding_window": cfg.get("sliding_window") or None,
        "checkpoint_quantization": quant,
        "quantization_scope": scope,
        "rope_positions": _rope_positions(cfg),
        "partial_rotary_factor": float(cfg.get("partial_rotary_factor") or 1.0),
        "source": source,
    }


def _dense(cfg: Config, name: str, source: str) -> dict[str, Any]:
    fam = str(cfg.get("model_type") or "llama")
    d = _base(cfg, name, source, fam)
    if fam == "qwen2" and "attention_bias" not in cfg:
        d["attention_bias"] = True  # Qwen2's q, k, v carry biases; its config does not say
    if fam in ("qwen3",):
        d["qk_norm"] = True
    if fam in ("qwen2", "qwen3") and not cfg.get("use_sliding_window"):
        d["sliding_window"] = None  # a window in the config but switched off
        d["layer_types"] = ()
    if fam == "mistral" and d["sliding_window"] and not d["layer_types"]:
        d["layer_types"] = ("sliding",) * d["num_hidden_layers"]
    if not d["layer_types"]:
        d["sliding_window"] = None
    return d


def _gemma3(cfg: Config, name: str, source: str) -> dict[str, Any]:
    d = _base(cfg, name, source, str(cfg.get("model_type")))
    d["qk_norm"] = True
    d["norms_per_layer"] = 4  # input, post-attention, pre- and post-feedforward
    d["tie_word_embeddings"] = bool(cfg.get("tie_word_embeddings", True))
    if cfg.get("rope_local_base_freq"):  # the local layers' own, unscaled table
        d["rope_local_positions"] = d["max_position_embeddings"]
    if not d["layer_types"]:
        pattern = _int(cfg, "sliding_window_pattern", default=6)
        d["layer_types"] = tuple(
            "full" if (i + 1) % pattern == 0 else "sliding" for i in range(d["num_hidden_layers"])
        )
    return d


def _qwen_moe(cfg: Config, name: str, source: str) -> dict[str, Any]:
    d = _dense(cfg, name, source)
    d["family"] = str(cfg.get("model_type"))
    layers = d["num_hidden_layers"]
    step = _int(cfg, "decoder_sparse_step", default=1)
    only_mlp = {int(i) for i in cfg.get("mlp_only_layers") or []}
    dense = tuple(i for i in range(layers) if i in only_mlp or (i + 1) % step != 0)
    d["moe"] = Moe(
        num_experts=_int(cfg, "num_experts", "num_local_experts"),
        experts_per_token=_int(cfg, "num_experts_per_tok"),
        expert_intermediate_size=_int(cfg, "moe_intermediate_size"),
        shared_intermediate_size=_int(cfg, "shared_expert_intermediate_size", default=0),
        dense_layers=dense,
    )
    # Qwen2-MoE's shared expert has a sigmoid gate of one row: counted with the router
    return d


def _mixtral(cfg: Config, name: str, source: str) -> dict[str, Any]:
    d = _dense(cfg, name, source)
    d["family"] = "mixtral"
    d["moe"] = Moe(
        num_experts=_int(cfg, "num_local_experts"),
        experts_per_token=_int(cfg, "num_experts_per_tok"),
        expert_intermediate_size=_int(cfg, "intermediate_size"),
    )
    d["intermediate_size"] = 0
    return d


def _deepseek(cfg: Config, name: str, source: str) -> dict[str, Any]:
    fam = str(cfg.get("model_type"))
    d = _base(cfg, name, source, fam)
    layers = d["num_hidden_layers"]
    first_dense = _int(cfg, "first_k_dense_replace", default=0)
    freq = _int(cfg, "moe_layer_freq", default=1)
    dense = tuple(i for i in range(layers) if i < first_dense or i % freq != 0)
    moe_width = _int(cfg, "moe_intermediate_size")
    d["moe"] = Moe(
        num_experts=_int(cfg, "n_routed_experts"),
        experts_per_token=_int(cfg, "num_experts_per_tok"),
        expert_intermediate_size=moe_width,
        shared_intermediate_size=_int(cfg, "n_shared_experts", default=0) * moe_width,
        dense_layers=dense,
        router_bias=fam != "deepseek_v2",  # V3's e_score_correction_bias
    )
    d["mla"] = Mla(
        q_lora_rank=cfg.get("q_lora_rank") or None,
        kv_lora_rank=_int(cfg, "kv_lora_rank"),
        qk_nope_head_dim=_int(cfg, "qk_nope_head_dim"),
        qk_rope_head_dim=_int(cfg, "qk_rope_head_dim"),
        v_head_dim=_int(cfg, "v_head_dim"),
    )
    d["head_dim"] = d["mla"].qk_head_dim
    d["num_key_value_heads"] = d["num_attention_heads"]
    d["mtp_layers"] = _int(cfg, "num_nextn_predict_layers", default=0)
    return d


def _glm4_moe(cfg: Config, name: str, source: str) -> dict[str, Any]:
    d = _base(cfg, name, source, "glm4_moe")
    layers = d["num_hidden_layers"]
    first_dense = _int(cfg, "first_k_dense_replace", default=0)
    moe_width = _int(cfg, "moe_intermediate_size")
    d["moe"] = Moe(
        num_experts=_int(cfg, "n_routed_experts"),
        experts_per_token=_int(cfg, "num_experts_per_tok"),
        expert_intermediate_size=moe_width,
        shared_intermediate_size=_int(cfg, "n_shared_experts", default=0) * moe_width,
        dense_layers=tuple(range(min(first_dense, layers))),
        router_bias=True,  # e_score_correction_bias
    )
    d["qk_norm"] = bool(cfg.get("use_qk_norm", False))
    d["mtp_layers"] = _int(cfg, "num_nextn_predict_layers", default=0)
    return d


def _gpt_oss(cfg: Config, name: str, source: str) -> dict[str, Any]:
    d = _base(cfg, name, source, "gpt_oss")
    d["moe"] = Moe(
        num_experts=_int(cfg, "num_local_experts"),
        experts_per_token=_int(cfg, "num_experts_per_tok", "experts_per_token"),
        expert_intermediate_size=_int(cfg, "intermediate_size"),
        expert_bias=True,
        router_bias=True,
    )
    d["intermediate_size"] = 0
    d["attention_bias"] = True
    d["attention_out_bias"] = True
    d["attention_sinks"] = True
    if not d["layer_types"]:  # the released config lists them; older copies alternate
        d["layer_types"] = tuple(
            "sliding" if i % 2 == 0 else "full" for i in range(d["num_hidden_layers"])
        )
    return d


def _llama4(cfg: Config, name: str, source: str) -> dict[str, Any]:
    d = _base(cfg, name, source, "llama4_text")
    layers = d["num_hidden_layers"]
    step = _int(cfg, "interleave_moe_layer_step", default=1)
    moe_layers = cfg.get("moe_layers")
    moe_set = (
        {int(i) for i in moe_layers}
        if moe_layers is not None
        else set(range(step - 1, layers, step))
    )
    width = _int(cfg, "intermediate_size")
    d["moe"] = Moe(
        num_experts=_int(cfg, "num_local_experts"),
        experts_per_token=_int(cfg, "num_experts_per_tok"),
        expert_intermediate_size=width,
        shared_intermediate_size=width,  # one shared expert as wide as a routed one
        dense_layers=tuple(i for i in range(layers) if i not in moe_set),
    )
    d["intermediate_size"] = _int(cfg, "intermediate_size_mlp", default=width)
    rope = cfg.get("no_rope_layers")
    if not rope:  # every fourth layer is a global NoPE layer
        rope = [int((i + 1) % 4 != 0) for i in range(layers)]
    if cfg.get("attention_chunk_size"):
        d["attention_chunk_size"] = int(cfg["attention_chunk_size"])
        d["layer_types"] = tuple("chunked" if r else "full" for r in rope)
    return d


READERS: dict[str, Callable[[Config, str, str], dict[str, Any]]] = {
    **{f: _dense for f in ("llama", "mistral", "qwen2", "qwen3", "granite", "phi3", "olmo2")},
    "gemma3": _gemma3,
    "gemma3_text": _gemma3,
    "qwen2_moe": _qwen_moe,
    "qwen3_moe": _qwen_moe,
    "mixtral": _mixtral,
    "deepseek_v2": _deepseek,
    "deepseek_v3": _deepseek,
    "kimi_k2": _deepseek,
    "glm4_moe": _glm4_moe,
    "gpt_oss": _gpt_oss,
    "llama4": _llama4,
    "llama4_text": _llama4,
}


def _vision_params(cfg: Config, text_hidden: int) -> int:
    """The vision encoder's weights (a ViT: attention and MLP per layer) and the projector to
    the language model: loaded with it, not part of a text token's compute."""
    v = cfg.get("vision_config")
    if not isinstance(v, dict):
        return 0
    try:
        h, layers = int(v["hidden_size"]), int(v["num_hidden_layers"])
        inner = int(v.get("intermediate_size") or 4 * h)
    except (KeyError, TypeError, ValueError):
        return 0
    out = int(v.get("vision_output_dim") or v.get("projector_output_dim") or h)
    return layers * (4 * h * h + 2 * h * inner) + out * text_hidden


def read_config(cfg: Config, name: str, source: str) -> Architecture:
    """The architecture a config.json describes; a :class:`ConfigReadError` naming what is
    missing when the family is not modelled or a field the reader needs is absent."""
    vision_cfg = cfg
    if isinstance(cfg.get("text_config"), dict):
        outer = str(cfg.get("model_type") or "")
        cfg = {**cfg, **cfg["text_config"]}
        if outer == "llama4":
            cfg["model_type"] = "llama4_text"
    family = str(cfg.get("model_type") or "")
    if family in UNMODELLED:
        raise ConfigReadError(
            f"{name} is a {family} model: {UNMODELLED[family]}, which the simulator does not model",
            hint="the simulator models dense, mixture-of-experts, MLA, sliding-window and "
            f"chunked-attention transformers (families: {', '.join(sorted(READERS))})",
            code="sim.unmodelled_family",
        )
    reader = READERS.get(family)
    if reader is None:
        if family and any(
            k in cfg for k in ("num_local_experts", "num_experts", "n_routed_experts")
        ):
            raise ConfigReadError(
                f"{name} is a mixture-of-experts model of family {family!r}, which the "
                "simulator has no reader for",
                hint=f"families the simulator reads: {', '.join(sorted(READERS))}",
                code="sim.unmodelled_family",
            )
        reader = _dense  # a Llama-style dense model under another name
    try:
        fields = reader(cfg, name, source)
        fields["vision_params"] = _vision_params(vision_cfg, fields["hidden_size"])
        return Architecture.model_validate(fields)
    except KeyError as exc:
        raise ConfigReadError(
            f"{name} ({family or 'no model_type'}) lacks a field the simulator needs: "
            f"{exc.args[0]}",
            hint="give the model's own config.json from its Hugging Face repository",
        ) from exc
    except (TypeError, ValueError, ZeroDivisionError) as exc:
        raise ConfigReadError(
            f"{name} ({family or 'no model_type'}) has a field the simulator cannot read: {exc}",
            hint="give the model's own config.json from its Hugging Face repository",
        ) from exc
