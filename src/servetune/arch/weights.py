"""The weight bytes of one GPU: what it holds (the memory plan) and what a step reads.

Both come from one split of the model (:class:`RankWeights`), for a format, a parallel layout
and an architecture:

* ``dense`` — attention projections, dense MLPs, shared experts and the router: split over
  the attention's tensor-parallel ranks (MLA's down-projections ``q_a`` and ``kv_a`` are
  replicated on every rank, as vLLM and SGLang build them);
* ``experts`` — all routed experts this GPU holds: split ``moe_tp × moe_ep`` ways;
* ``head`` — the lm_head (vocabulary-parallel; the embedding table itself when tied);
* ``embedding`` — the input table (gathered a few rows a step, not streamed) and a vision
  encoder (held, not read by a text step);
* ``extra`` — norms, biases, sinks, in 16 bits.

A step reads the dense part, the lm_head and the experts its tokens route to: at ``T``
tokens choosing top-k of ``E`` experts, an expert is untouched with probability
``(1 − k/E)^T``, so a step reads ``1 − (1 − k/E)^T`` of the expert bytes
(:meth:`RankWeights.expert_coverage`).
"""

from __future__ import annotations

from dataclasses import dataclass

from servetune.arch.architecture import Architecture
from servetune.arch.gpus import GpuSpec
from servetune.arch.parallel import Parallelism
from servetune.arch.precision import (
    HopperMxfp4Kernel,
    Mxfp4MoeLayout,
    mxfp4_moe_layout,
    weight_format,
)

EXTRA_BYTES = 2.0
"""Norms, biases and embeddings are kept in 16 bits whatever the weights' format."""


@dataclass(frozen=True)
class RankWeights:
    """Bytes of weights on one GPU, by part (see the module docstring)."""

    dense: float
    experts: float
    head: float
    embedding: float
    extra: float
    num_experts: int
    experts_per_token: int
    tied: bool = False
    """The lm_head is the embedding table: held once, read by every step."""

    @property
    def resident(self) -> float:
        """Everything the GPU holds."""
        own_head = 0.0 if self.tied else self.head
        return self.dense + self.experts + own_head + self.embedding + self.extra

    @property
    def streamed_fixed(self) -> float:
        """What every step reads whatever its batch (all but the experts and the
        embedding table)."""
        return self.dense + self.head + self.extra

    def expert_coverage(self, tokens: float) -> float:
        """Expected share of the experts a step of ``tokens`` tokens routes to."""
        if not self.num_experts:
            return 0.0
        untouched: float = (1.0 - self.experts_per_token / self.num_experts) ** tokens
        return 1.0 - untouched

    def streamed(self, tokens: float) -> float:
        """Bytes a step of ``tokens`` tokens (over all data-parallel ranks) reads."""
        return self.streamed_fixed + self.experts * self.expert_coverage(tokens)


def _up(n: int, align: int) -> int:
    return -(-n // align) * align


def mxfp4_expert_bytes(m: Architecture, par: Parallelism, layout: Mxfp4MoeLayout) -> float:
    """The routed experts' bytes on one GPU as vLLM holds MXFP4 experts with ``layout``:
    gate/up (``2I × H``) and down (``H × I``) of each local expert at half a byte a weight
    plus a scale byte per 32, the widths padded to the kernel's tile
    (:class:`~servetune.arch.precision.Mxfp4MoeLayout`)."""
    moe = m.moe
    if moe is None:
        return 0.0
    inner = _up(moe.expert_intermediate_size // par.moe_tp, layout.intermediate_align)
    hidden = _up(m.hidden_size, layout.hidden_align)
    local = moe.num_experts / par.moe_ep
    per_expert = 3 * inner * hidden * (0.5 + 1 / 32)
    return m.moe_layer_count * local * per_expert


def rank_weights(
    m: Architecture,
    quantization: str | None,
    par: Parallelism,
    gpu: GpuSpec | None = None,
    hopper_mxfp4: HopperMxfp4Kernel = "marlin",
) -> RankWeights:
    """The split of ``m``'s weights onto one GPU (see the module docstring). With ``gpu``,
    MXFP4 experts are counted as vLLM's kernel for that GPU lays them out
    (:func:`mxfp4_expert_bytes`; ``hopper_mxfp4``: the kernel a Hopper installation runs,
    :func:`~servetune.arch.precision.mxfp4_moe_layout`); without it, at their checkpoint
    size."""
    fmt = weight_format(quantization).bytes_per_param
    dense_fmt = fmt if m.quantization_scope == "all" else EXTRA_BYTES
    tp = par.attn_tp
    replicated = 0
    if m.mla is not None:
        a = m.mla
        per_layer = m.hidden_size * ((a.q_lora_rank or 0) + a.latent_dim)
        replicated = m.num_hidden_layers * per_layer
    dense_params = m.dense_linear_params - replicated
    mlp_extra = 0
    if m.moe is not None and m.moe.expert_bias:
        mlp_extra = (
            m.moe_layer_count
            * m.moe.num_experts
            * (2 * m.moe.expert_intermediate_size + m.hidden_size)
        )
    expert_params = m.moe_layer_count * (m.moe.num_experts if m.moe else 0) * m.expert_params
    expert_params -= mlp_extra
    norms = m.num_hidden_layers * (m.attention_extra_params + m.norms_per_layer * m.hidden_size)
    norms += m.hidden_size
    experts = expert_params * fmt / (par.moe_tp * par.moe_ep)
    if gpu is not None and weight_format(quantization).name == "mxfp4" and m.moe is not None:
        experts = mxfp4_expert_bytes(m, par, mxfp4_moe_layout(gpu, hopper_mxfp4))
    return RankWeights(
        dense=dense_params * dense_fmt / tp + replicated * dense_fmt,
        experts=experts,
        head=m.embedding_params * EXTRA_BYTES / tp,
        tied=m.tie_word_embeddings,
        embedding=(m.embedding_params + m.vision_params) * EXTRA_BYTES / tp,
        extra=norms * EXTRA_BYTES / tp + mlp_extra * EXTRA_BYTES / (par.moe_tp * par.moe_ep),
        num_experts=m.moe.num_experts if m.moe else 0,
        experts_per_token=m.moe.experts_per_token if m.moe else 0,
    )


def mtp_layer_weights(
    m: Architecture, quantization: str | None, par: Parallelism
) -> tuple[float, float]:
    """(dense bytes, routed-expert bytes) of one multi-token-prediction layer on one GPU,
    loaded when it drafts for speculative decoding: a decoder layer of the model's own shape
    (its average layer's share of the dense weights, norms and biases; one MoE layer's
    experts) and the projection of [embedding; hidden] back to the hidden size; the
    embeddings and the lm_head are the model's. (0, 0) for a model without MTP layers."""
    if not m.mtp_layers:
        return 0.0, 0.0
    w = rank_weights(m, quantization, par)
    fmt = weight_format(quantization).bytes_per_param
    L = m.num_hidden_layers
    proj = 2 * m.hidden_size * m.hidden_size * fmt / par.attn_tp
    experts = w.experts / m.moe_layer_count if m.moe_layer_count else 0.0
    return (w.dense + w.extra) / L + proj, experts
