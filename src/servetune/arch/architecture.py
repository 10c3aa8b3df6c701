"""One description of a decoder-only transformer, whatever its family.

An :class:`Architecture` says what a Hugging Face ``config.json`` says about the compute and
the memory of a model: the layers and their widths; the attention (grouped-query, or DeepSeek's
multi-head latent attention, :class:`Mla`), which layers attend over the whole context and which
over a sliding window or a local chunk; the MLP of each layer, dense or a mixture of experts
(:class:`Moe`: routed experts, top-k, shared experts, the dense leading layers); the
multi-token-prediction layers; the vocabulary. Everything else is derived from it, here and
nowhere else: parameter counts (total and active), the weights of one layer's matrix
multiplications, the KV bytes a token costs, the FLOPs of a token.

Families are read into it by :mod:`servetune.arch.families`; the catalog of named models is
:mod:`servetune.arch.models`.

Counting conventions (each checked against the model cards, ``tests/arch``):

* total parameters: embeddings, the lm_head unless tied, every layer's projections, biases and
  norms, the final norm, and the MTP layers (:attr:`Architecture.mtp_layers`; DeepSeek-V3's
  card counts 671B main + 14B MTP = 685B, :meth:`Architecture.param_count` with
  ``mtp=False`` gives the first);
* active parameters: the same with each MoE layer's routed experts counted ``top-k`` times
  instead of ``num_experts`` times;
* KV cache per token: K and V of every full-attention layer (GQA), or the compressed latent
  plus the rotary key (MLA, ``kv_lora_rank + qk_rope_head_dim`` elements per layer, the same on
  every tensor-parallel rank); sliding-window and chunked layers hold at most their window.
"""

from __future__ import annotations

from functools import cached_property
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

AttentionKind = Literal["full", "sliding", "chunked"]
"""What a layer attends over: the whole context, the last ``sliding_window`` tokens, or the
tokens of its own ``attention_chunk_size`` chunk (Llama-4's local layers)."""


class Mla(BaseModel):
    """Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2): K and V are one compressed
    latent of ``kv_lora_rank`` per token plus a shared rotary key of ``qk_rope_head_dim``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    q_lora_rank: int | None = Field(default=None, gt=0)
    """The query's low-rank width; None: the query is projected directly (DeepSeek-V2-Lite)."""
    kv_lora_rank: int = Field(gt=0)
    qk_nope_head_dim: int = Field(gt=0)
    qk_rope_head_dim: int = Field(gt=0)
    v_head_dim: int = Field(gt=0)

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def latent_dim(self) -> int:
        """Elements a token stores per layer: the latent and the rotary key."""
        return self.kv_lora_rank + self.qk_rope_head_dim


class Moe(BaseModel):
    """A mixture-of-experts MLP: ``num_experts`` routed experts of which a token uses
    ``experts_per_token``, plus shared experts every token uses; layers listed in
    ``dense_layers`` have an ordinary MLP of the architecture's ``intermediate_size``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_experts: int = Field(gt=1)
    experts_per_token: int = Field(gt=0)
    expert_intermediate_size: int = Field(gt=0)
    shared_intermediate_size: int = Field(default=0, ge=0)
    """Width of the shared-expert MLP (all shared experts together); 0: none."""
    dense_layers: tuple[int, ...] = ()
    """Indices of the layers whose MLP is dense (DeepSeek's first_k_dense_replace, Llama-4
    Maverick's interleaving)."""
    expert_bias: bool = False
    """Biases on the experts' projections (gpt-oss)."""
    router_bias: bool = False

    @model_validator(mode="after")
    def _top_k_within(self) -> Moe:
        if self.experts_per_token > self.num_experts:
            raise ValueError(
                f"experts_per_token ({self.experts_per_token}) exceeds num_experts "
                f"({self.num_experts})"
            )
        return self

    def expert_params(self, hidden: int) -> int:
        """Weights of one routed expert: gate, up and down projections (and their biases)."""
        n = 3 * hidden * self.expert_intermediate_size
        if self.expert_bias:
            n += 2 * self.expert_intermediate_size + hidden
        return n

    def router_params(self, hidden: int) -> int:
        return hidden * self.num_experts + (self.num_experts if self.router_bias else 0)

    def shared_params(self, hidden: int) -> int:
        return 3 * hidden * self.shared_intermediate_size


class Architecture(BaseModel):
    """A decoder-only transformer as its config.json describes it (see the module docstring)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    name: str
    aliases: list[str] = Field(default_factory=list)
    family: str = "llama"
    """The Hugging Face ``model_type`` it was read as."""
    num_hidden_layers: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    num_attention_heads: int = Field(gt=0)
    num_key_value_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    intermediate_size: int = Field(ge=0)
    """The dense MLP's width (of every layer, or of a MoE model's dense layers)."""
    vocab_size: int = Field(gt=0)
    tie_word_embeddings: bool = False
    max_position_embeddings: int = Field(gt=0)
    attention_bias: bool = False
    """Biases on q, k and v (Qwen2, gpt-oss)."""
    attention_out_bias: bool = False
    """A bias on the output projection too (gpt-oss)."""
    qk_norm: bool = False
    """RMSNorm over each head's q and k (Qwen3, Gemma-3, GLM-4.5)."""
    norms_per_layer: int = Field(default=2, ge=0)
    """RMSNorms of hidden width per layer (2; Gemma-3 has 4)."""
    mla: Mla | None = None
    moe: Moe | None = None
    layer_types: tuple[AttentionKind, ...] = ()
    """Each layer's attention; empty: every layer is full attention."""
    sliding_window: int | None = Field(default=None, gt=0)
    attention_chunk_size: int | None = Field(default=None, gt=0)
    attention_sinks: bool = False
    """A learned sink logit per head (gpt-oss): a parameter per head, no KV."""
    vision_params: int = Field(default=0, ge=0)
    """A multimodal model's vision encoder and projector (Llama-4, Gemma-3): loaded with the
    model, in 16 bits, outside a text token's compute."""
    rope_positions: int = Field(default=0, ge=0)
    """Positions of the rotary table the engine precomputes (vLLM's ``get_rope``: the
    ``max_position_embeddings`` for plain and Llama-3 scaling, times the factor for linear
    and dynamic scaling, ``original_max_position_embeddings`` × factor for YaRN); 0: the
    ``max_position_embeddings``."""
    rope_local_positions: int = Field(default=0, ge=0)
    """A second rotary table (Gemma-3's local layers, ``rope_local_base_freq``); 0: none."""
    partial_rotary_factor: float = Field(default=1.0, gt=0, le=1)
    """Share of a head's dimensions that are rotated (GLM-4.5: 0.5)."""
    mtp_layers: int = Field(default=0, ge=0)
    """Multi-token-prediction layers shipped with the model (DeepSeek-V3's
    num_nextn_predict_layers): used as the draft of speculative decoding."""
    checkpoint_quantization: str | None = None
    """The weights' format as published (gpt-oss: mxfp4; DeepSeek-V3: fp8): what an engine
    loads unless told otherwise."""
    quantization_scope: Literal["all", "experts"] = "all"
    """Which matrix multiplications a quantization applies to: all of them, or only the
    routed experts (gpt-oss keeps attention, router and embeddings in BF16)."""
    source: str = ""
    uncertain: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _layers_consistent(self) -> Architecture:
        L = self.num_hidden_layers
        if self.layer_types and len(self.layer_types) != L:
            raise ValueError(
                f"layer_types lists {len(self.layer_types)} layers for num_hidden_layers {L}"
            )
        if "sliding" in self.layer_types and self.sliding_window is None:
            raise ValueError("sliding-window layers without a sliding_window")
        if "chunked" in self.layer_types and self.attention_chunk_size is None:
            raise ValueError("chunked-attention layers without an attention_chunk_size")
        if self.moe is not None and any(not 0 <= i < L for i in self.moe.dense_layers):
            raise ValueError(f"a dense layer index outside 0..{L - 1}")
        return self

    # --- the layers ---------------------------------------------------------------------------
    def attention_kind(self, layer: int) -> AttentionKind:
        return self.layer_types[layer] if self.layer_types else "full"

    @cached_property
    def attention_counts(self) -> dict[AttentionKind, int]:
        """How many layers attend over the whole context, a window, a chunk."""
        counts: dict[AttentionKind, int] = {"full": 0, "sliding": 0, "chunked": 0}
        for i in range(self.num_hidden_layers):
            counts[self.attention_kind(i)] += 1
        return counts

    @property
    def window_of(self) -> dict[AttentionKind, int | None]:
        """The tokens a layer of each kind attends to at most (None: the whole context)."""
        return {"full": None, "sliding": self.sliding_window, "chunked": self.attention_chunk_size}

    @cached_property
    def moe_layer_count(self) -> int:
        if self.moe is None:
            return 0
        return self.num_hidden_layers - len(set(self.moe.dense_layers))

    @property
    def dense_layer_count(self) -> int:
        return self.num_hidden_layers - self.moe_layer_count

    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    # --- shapes -------------------------------------------------------------------------------
    @property
    def q_dim(self) -> int:
        """Width of the attention output (heads × value head size)."""
        if self.mla is not None:
            return self.num_attention_heads * self.mla.v_head_dim
        return self.num_attention_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_key_value_heads * self.head_dim

    @cached_property
    def attention_matmul_params(self) -> int:
        """One layer's attention projection weights (what a quantization applies to)."""
        h, n = self.hidden_size, self.num_attention_heads
        if self.mla is not None:
            m = self.mla
            if m.q_lora_rank:
                q = h * m.q_lora_rank + m.q_lora_rank * n * m.qk_head_dim
            else:
                q = h * n * m.qk_head_dim
            kv = h * m.latent_dim + m.kv_lora_rank * n * (m.qk_nope_head_dim + m.v_head_dim)
            return q + kv + n * m.v_head_dim * h
        qd = n * self.head_dim
        return 2 * h * qd + 2 * h * self.kv_dim

    @cached_property
    def attention_extra_params(self) -> int:
        """One layer's attention parameters outside the projections: biases, the q/k norms,
        MLA's latent norms, the sinks (kept in 16 bits whatever the weights' format)."""
        n = self.num_attention_heads
        if self.mla is not None:
            return (self.mla.q_lora_rank or 0) + self.mla.kv_lora_rank
        p = 0
        if self.attention_bias:
            p += n * self.head_dim + 2 * self.kv_dim
        if self.attention_out_bias:
            p += self.hidden_size
        if self.qk_norm:
            p += 2 * self.head_dim
        if self.attention_sinks:
            p += n
        return p

    @property
    def attention_params(self) -> int:
        """One layer's attention: projections and the rest."""
        return self.attention_matmul_params + self.attention_extra_params

    @property
    def dense_mlp_params(self) -> int:
        return 3 * self.hidden_size * self.intermediate_size

    @cached_property
    def moe_layer_params(self) -> int:
        """One MoE layer's MLP: every routed expert, the router and the shared experts."""
        if self.moe is None:
            return 0
        h, m = self.hidden_size, self.moe
        return m.num_experts * m.expert_params(h) + m.router_params(h) + m.shared_params(h)

    @cached_property
    def moe_layer_active_params(self) -> int:
        """One MoE layer's MLP weights a token uses: top-k experts, router, shared."""
        if self.moe is None:
            return 0
        h, m = self.hidden_size, self.moe
        return m.experts_per_token * m.expert_params(h) + m.router_params(h) + m.shared_params(h)

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def head_params(self) -> int:
        """The lm_head's own weights (0 when tied to the embeddings)."""
        return 0 if self.tie_word_embeddings else self.embedding_params

    @cached_property
    def layer_params(self) -> int:
        """All layers' weights (attention, MLPs, norms), the MTP layers excluded."""
        per_norms = self.norms_per_layer * self.hidden_size
        mlp = self.dense_layer_count * self.dense_mlp_params
        mlp += self.moe_layer_count * self.moe_layer_params
        return self.num_hidden_layers * (self.attention_params + per_norms) + mlp

    @cached_property
    def mtp_params(self) -> int:
        """The multi-token-prediction layers: each a decoder layer (MoE where the model is)
        with two input norms, the projection of [embedding; hidden] back to hidden, and its
        own final norm; embeddings and lm_head shared with the main model (DeepSeek-V3)."""
        if not self.mtp_layers:
            return 0
        h = self.hidden_size
        mlp = self.moe_layer_params if self.moe is not None else self.dense_mlp_params
        one = self.attention_params + self.norms_per_layer * h + mlp + 2 * h + 2 * h * h + h
        return self.mtp_layers * one

    def param_count_of(self, mtp: bool = True) -> int:
        """All parameters (the MTP layers too unless ``mtp`` is False)."""
        n = self.embedding_params + self.head_params + self.layer_params + self.hidden_size
        return n + self.vision_params + (self.mtp_params if mtp else 0)

    @property
    def param_count(self) -> int:
        """All parameters: embeddings, lm_head (unless tied), layers, biases, norms, MTP."""
        return self.param_count_of(mtp=True)

    @cached_property
    def active_param_count(self) -> int:
        """Parameters one token uses (MTP layers excluded): the routed experts counted top-k
        times per MoE layer."""
        unused = self.moe_layer_count * (self.moe_layer_params - self.moe_layer_active_params)
        return self.param_count_of(mtp=False) - unused - self.vision_params

    @property
    def rotary_dim(self) -> int:
        """Dimensions of a head the rotary embedding turns (MLA: the rotary key's)."""
        if self.mla is not None:
            return self.mla.qk_rope_head_dim
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def rope_cache_elements(self) -> int:
        """Elements of the precomputed cos/sin tables (one per distinct rotary embedding,
        shared by the layers that use it): ``positions × rotary_dim`` each. Every
        tensor-parallel rank holds them whole — Llama-4's 10,485,760 positions make 2.5 GiB
        per GPU in 16 bits."""
        n = (self.rope_positions or self.max_position_embeddings) * self.rotary_dim
        return n + self.rope_local_positions * self.rotary_dim

    # --- per token ----------------------------------------------------------------------------
    @cached_property
    def dense_linear_params(self) -> int:
        """The matrix-multiplication weights every token goes through (attention, dense
        MLPs, the router and shared experts of MoE layers; no embedding, no lm_head)."""
        shared = 0
        if self.moe is not None:
            h = self.hidden_size
            shared = self.moe.router_params(h) + self.moe.shared_params(h)
        return (
            self.num_hidden_layers * self.attention_matmul_params
            + self.dense_layer_count * self.dense_mlp_params
            + self.moe_layer_count * shared
        )

    @property
    def expert_params(self) -> int:
        """One routed expert's weights (0 for a dense model)."""
        return self.moe.expert_params(self.hidden_size) if self.moe is not None else 0

    @property
    def active_linear_params(self) -> int:
        """Matrix-multiplication weights per token: the dense part and top-k experts."""
        k = self.moe.experts_per_token if self.moe is not None else 0
        return self.dense_linear_params + self.moe_layer_count * k * self.expert_params

    def kv_elements_per_token(self, tp: int = 1) -> dict[AttentionKind, int]:
        """KV elements one token stores on one tensor-parallel rank, per attention kind
        (summed over that kind's layers): K and V of this rank's KV heads (replicated when
        TP exceeds them), or MLA's latent (the whole latent on every rank)."""
        if self.mla is not None:
            per_layer = self.mla.latent_dim
        else:
            heads = max(1, self.num_key_value_heads // tp) if tp > 1 else self.num_key_value_heads
            per_layer = 2 * heads * self.head_dim
        return {kind: n * per_layer for kind, n in self.attention_counts.items()}

    def kv_bytes_per_token(self, dtype_bytes: float, tp: int = 1) -> float:
        """KV cache bytes per token of context on one GPU, every layer counted (the bytes of
        a layer that holds only a window are counted too: see :meth:`kv_elements_per_token`
        for the split)."""
        return sum(self.kv_elements_per_token(tp).values()) * dtype_bytes

    def attention_flops_per_ctx(self, decode: bool) -> dict[AttentionKind, float]:
        """FLOPs one query token spends per token of context it attends to, per attention
        kind (summed over that kind's layers). GQA: 2·q_dim for QKᵀ plus 2·q_dim for AV.
        MLA decodes with the absorbed weights (queries in the latent space: 2·heads·(latent +
        rope) for QKᵀ, 2·heads·latent for AV) and prefills as multi-head attention over the
        decompressed keys and values (2·heads·(qk_head + v_head))."""
        n = self.num_attention_heads
        if self.mla is not None:
            m = self.mla
            if decode:
                per_layer = 2.0 * n * (m.latent_dim + m.kv_lora_rank)
            else:
                per_layer = 2.0 * n * (m.qk_head_dim + m.v_head_dim)
        else:
            per_layer = 4.0 * n * self.head_dim
        return {kind: c * per_layer for kind, c in self.attention_counts.items()}
