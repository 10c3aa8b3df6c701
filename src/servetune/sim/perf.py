"""Step time: how long one engine step takes on the simulated GPU (a roofline).

    t = max(FLOPs / (peak × mfu), bytes / (bandwidth × mbu))
        + step_overhead + per_seq_overhead × requests + tp_overhead (TP > 1)

FLOPs: 2 × linear weights per token (q, k, v, o, gated MLP, all layers) for every token in the
step, the lm_head for every sampled token, and attention — 4 × layers × q_dim × context per
decode token, 4 × layers × q_dim × c × (offset + c/2) per prefill chunk of c tokens (causal).
Bytes: the weights once per step, the KV cache read by attention (decode contexts, and the
earlier chunks of a chunked prefill), the KV written for every token. All divided by the
tensor-parallel size (each GPU holds 1/tp of the weights and heads). With TP > 1 each layer
adds two all-reduces of the step's activations (tokens × hidden × 2 bytes), a ring moving
2(tp−1)/tp of them over the GPU's interconnect (catalog ``interconnect_gb_s``), plus a fixed
``tp_overhead`` per step (collective latency, worker synchronisation). The constants mfu, mbu
and the overheads come from ``catalog.efficiency`` (calibrated per GPU, with their source).
"""

from __future__ import annotations

from dataclasses import dataclass

from servetune.sim.catalog import Efficiency, efficiency
from servetune.sim.config import ResolvedConfig


@dataclass(frozen=True)
class DecodeCoeffs:
    """Time of a decode-only step as a function of the summed context S (seconds):
    ``max(f0 + f1·S, m0 + m1·S) + c``."""

    f0: float
    f1: float
    m0: float
    m1: float
    c: float

    def time(self, s: float) -> float:
        return max(self.f0 + self.f1 * s, self.m0 + self.m1 * s) + self.c


class StepModel:
    """Step-time model for one resolved configuration."""

    def __init__(self, r: ResolvedConfig, eff: Efficiency | None = None) -> None:
        self.eff = eff or efficiency(r.gpu)
        m = r.model
        tp = r.tensor_parallel_size
        self.tp = tp
        use_fp8 = r.quantization == "fp8" and r.gpu.fp8_tflops is not None
        peak = (r.gpu.fp8_tflops if use_fp8 and r.gpu.fp8_tflops else r.gpu.bf16_tflops) * 1e12
        self.flops_per_s = peak * self.eff.mfu
        self.bytes_per_s = r.gpu.hbm_gb_s * 1e9 * self.eff.mbu
        L = m.num_hidden_layers
        self.linear_flops_per_token = 2.0 * L * m.layer_linear_params / tp
        self.head_flops_per_sample = 2.0 * m.hidden_size * m.vocab_size / tp
        self.attn_flops_per_ctx = 4.0 * L * m.q_dim / tp
        linear_bytes = L * m.layer_linear_params * r.weight_bytes_per_param
        other_bytes = (m.param_count - L * m.layer_linear_params) * 2.0
        # The input embedding table is gathered (a few rows), not streamed: count the lm_head.
        emb = m.embedding_params * 2.0
        self.weight_bytes = (
            linear_bytes + other_bytes - (0 if m.tie_word_embeddings else emb)
        ) / tp
        self.kv_bytes_per_token = m.kv_bytes_per_token(r.kv_dtype_bytes, tp)
        self.fixed_s = self.eff.step_overhead_ms / 1e3 + (
            self.eff.tp_overhead_ms / 1e3 if tp > 1 else 0.0
        )
        self.per_seq_s = self.eff.per_seq_overhead_us / 1e6
        # seconds of all-reduce traffic per token in the step (0 without TP)
        self.comm_per_token = 0.0
        if tp > 1:
            volume = 2 * L * m.hidden_size * 2.0 * 2 * (tp - 1) / tp
            self.comm_per_token = volume / (r.interconnect_gb_s * 1e9)

    def step_time(
        self,
        num_tokens: int,
        num_seqs: int,
        num_sampled: int,
        decode_ctx: float,
        prefill_attn: float = 0.0,
        prefill_kv_read: float = 0.0,
    ) -> float:
        """Seconds for one step.

        ``num_tokens``: tokens computed in the step (decodes + prefill chunks);
        ``num_seqs``: requests in the step; ``num_sampled``: tokens sampled (decodes and
        prefills that complete); ``decode_ctx``: summed context of the decode tokens;
        ``prefill_attn``: Σ c·(offset + c/2) over prefill chunks; ``prefill_kv_read``: Σ offset.
        """
        flops = (
            self.linear_flops_per_token * num_tokens
            + self.head_flops_per_sample * num_sampled
            + self.attn_flops_per_ctx * (decode_ctx + prefill_attn)
        )
        nbytes = self.weight_bytes + self.kv_bytes_per_token * (
            decode_ctx + prefill_kv_read + num_tokens
        )
        return (
            max(flops / self.flops_per_s, nbytes / self.bytes_per_s)
            + self.fixed_s
            + self.per_seq_s * num_seqs
            + self.comm_per_token * num_tokens
        )

    def decode_coeffs(self, n: int) -> DecodeCoeffs:
        """Coefficients of a decode-only step of ``n`` requests (see :class:`DecodeCoeffs`)."""
        f0 = (self.linear_flops_per_token + self.head_flops_per_sample) * n / self.flops_per_s
        f1 = self.attn_flops_per_ctx / self.flops_per_s
        m0 = (self.weight_bytes + self.kv_bytes_per_token * n) / self.bytes_per_s
        m1 = self.kv_bytes_per_token / self.bytes_per_s
        c = self.fixed_s + (self.per_seq_s + self.comm_per_token) * n
        return DecodeCoeffs(f0, f1, m0, m1, c)
