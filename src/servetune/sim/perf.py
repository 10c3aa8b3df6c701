"""Step time: how long one engine step takes on the simulated GPU.

One vLLM V1 step runs its kernels one after another, so the model is a sum of parts, each a
roofline of its own::

    t = linear + attention + all-reduce + cpu

    linear    = max(linear FLOPs / (peak × mfu), weight bytes / (HBM × mbu))
    attention = max(attention FLOPs / (peak × mfu), KV bytes / (HBM × mbu))
    all-reduce (TP > 1) = 2 × layers × (latency + activation bytes × 2(tp−1)/tp / link)
    cpu       = step_overhead + per_seq_overhead × requests in the step

With async scheduling (vLLM's ``--async-scheduling``, on by default in the releases after
vLLM PR #27614, i.e. after 0.11.0) the scheduler prepares step N+1 while the GPU runs step N,
so the CPU part overlaps the GPU part: ``t = max(linear + attention + all-reduce, cpu)``
(``Efficiency.async_scheduling``).

Linear FLOPs are 2 × the linear weights per token (q, k, v, o and the gated MLP of every
layer) plus the lm_head for every sampled token; a step of at most the largest CUDA-graph
capture size is padded up to the next captured size (vLLM V1 captures piecewise graphs for
1, 2, 4, then multiples of 8 below 256 and of 16 up to min(2 × max_num_seqs, 512) tokens, and
replays the smallest that fits). Weight bytes are read once per step. Attention FLOPs are
4 × layers × q_dim × context per decode token and the causal 4 × layers × q_dim × c × (offset
+ c/2) per prefill chunk; KV bytes are the cache read by decodes and by later prefill chunks
plus the KV written for every token. The GEMMs and the attention kernel do not overlap, which
is why the parts add: a step that is compute-bound in its GEMMs still pays for streaming the
KV cache in its attention. Everything is per GPU (1/tp of the weights and heads).

The constants (mfu, mbu, the two CPU overheads, the all-reduce latency) come from
``catalog.efficiency``: calibrated per GPU against published vLLM measurements, each with its
source (``data/efficiency.json``).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

from servetune.sim.catalog import Efficiency, GpuSpec, ModelSpec, efficiency
from servetune.sim.config import ResolvedConfig


@dataclass(frozen=True)
class ModelFlops:
    """FLOPs of the whole model (all GPUs together): ``linear`` per token computed (2 × the
    linear weights), ``head`` per token sampled (the lm_head), ``attention_per_ctx`` per
    token of context attended to (4 × layers × q_dim)."""

    linear: float
    head: float
    attention_per_ctx: float

    def per_token(self, input_len: float, output_len: float) -> tuple[float, float]:
        """(FLOPs per prompt token, FLOPs per generated token) of a request of these lengths:
        a prompt token attends to half the prompt on average (causal), a generated token to
        the prompt and half the output, and samples once."""
        prompt = self.linear + self.attention_per_ctx * input_len / 2
        gen = self.linear + self.head + self.attention_per_ctx * (input_len + output_len / 2)
        return prompt, gen


def model_flops(m: ModelSpec) -> ModelFlops:
    """The step model's FLOP counts of model M (see the module docstring)."""
    L = m.num_hidden_layers
    return ModelFlops(
        linear=2.0 * L * m.layer_linear_params,
        head=2.0 * m.hidden_size * m.vocab_size,
        attention_per_ctx=4.0 * L * m.q_dim,
    )


def peak_flops(gpu: GpuSpec, quantization: str | None, tp: int = 1) -> float:
    """Dense peak FLOP/s of TP such GPUs for the linear layers: fp8 tensor cores for fp8
    weights where the GPU has them, else bf16."""
    use_fp8 = quantization == "fp8" and gpu.fp8_tflops is not None
    tflops = gpu.fp8_tflops if use_fp8 and gpu.fp8_tflops else gpu.bf16_tflops
    return tflops * 1e12 * tp


def capture_sizes(max_num_seqs: int) -> tuple[int, ...]:
    """The batch sizes vLLM V1 captures CUDA graphs for (its default rule)."""
    top = min(2 * max_num_seqs, 512)
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, top + 1, 16)]
    return tuple(s for s in sizes if s <= top) or (1,)


@dataclass(frozen=True)
class DecodeCoeffs:
    """Time of a decode-only step as a function of the summed context S (seconds):
    ``max(f0 + f1·S, m0 + m1·S, floor) + c`` (``floor``: the CPU part when it overlaps the
    GPU's, 0 otherwise)."""

    f0: float
    f1: float
    m0: float
    m1: float
    c: float
    floor: float = 0.0

    def time(self, s: float) -> float:
        return max(self.f0 + self.f1 * s, self.m0 + self.m1 * s, self.floor) + self.c


class StepModel:
    """Step-time model for one resolved configuration."""

    def __init__(self, r: ResolvedConfig, eff: Efficiency | None = None) -> None:
        self.eff = eff or efficiency(r.gpu)
        m = r.model
        tp = r.tensor_parallel_size
        self.tp = tp
        peak = peak_flops(r.gpu, r.quantization)
        self.flops_per_s = peak * self.eff.mfu
        # attention runs in BF16 whatever the weights are
        self.attn_flops_per_s = r.gpu.bf16_tflops * 1e12 * self.eff.mfu
        self.bytes_per_s = r.gpu.hbm_gb_s * 1e9 * self.eff.mbu
        L = m.num_hidden_layers
        per_token = model_flops(m)
        self.linear_flops_per_token = per_token.linear / tp
        self.head_flops_per_sample = per_token.head / tp
        self.attn_flops_per_ctx = per_token.attention_per_ctx / tp
        linear_bytes = L * m.layer_linear_params * r.weight_bytes_per_param
        other_bytes = (m.param_count - L * m.layer_linear_params) * 2.0
        # The input embedding table is gathered (a few rows), not streamed: count the lm_head.
        emb = m.embedding_params * 2.0
        self.weight_bytes = (
            linear_bytes + other_bytes - (0 if m.tie_word_embeddings else emb)
        ) / tp
        self.kv_bytes_per_token = m.kv_bytes_per_token(r.kv_dtype_bytes, tp)
        self.graph_sizes = capture_sizes(r.max_num_seqs)
        self.fixed_s = self.eff.step_overhead_ms / 1e3
        self.per_seq_s = self.eff.per_seq_overhead_us / 1e6
        self.overlap = self.eff.async_scheduling
        # all-reduce: a fixed latency per collective and the ring's bytes over the link
        self.comm_fixed_s = 0.0
        self.comm_per_token = 0.0
        if tp > 1:
            n_coll = 2 * L
            self.comm_fixed_s = n_coll * self.eff.allreduce_latency_us / 1e6
            volume = n_coll * m.hidden_size * 2.0 * 2 * (tp - 1) / tp
            self.comm_per_token = volume / (r.interconnect_gb_s * 1e9)

    def padded(self, num_tokens: int) -> int:
        """Tokens the GPU computes: a captured CUDA-graph size when the step fits one."""
        sizes = self.graph_sizes
        if num_tokens > sizes[-1]:
            return num_tokens
        return sizes[bisect_left(sizes, num_tokens)]

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
        padded = self.padded(num_tokens)
        lin_flops = self.linear_flops_per_token * padded + self.head_flops_per_sample * num_sampled
        linear = max(lin_flops / self.flops_per_s, self.weight_bytes / self.bytes_per_s)
        attn_flops = self.attn_flops_per_ctx * (decode_ctx + prefill_attn)
        kv_bytes = self.kv_bytes_per_token * (decode_ctx + prefill_kv_read + num_tokens)
        attention = max(attn_flops / self.attn_flops_per_s, kv_bytes / self.bytes_per_s)
        gpu = linear + attention + self.comm_fixed_s + self.comm_per_token * padded
        cpu = self.fixed_s + self.per_seq_s * num_seqs
        if self.overlap:
            return gpu if gpu > cpu else cpu
        return gpu + cpu

    def decode_coeffs(self, n: int) -> DecodeCoeffs:
        """Coefficients of a decode-only step of ``n`` requests (see :class:`DecodeCoeffs`)."""
        padded = self.padded(n)
        lin_flops = self.linear_flops_per_token * padded + self.head_flops_per_sample * n
        linear = max(lin_flops / self.flops_per_s, self.weight_bytes / self.bytes_per_s)
        gpu = linear + self.comm_fixed_s + self.comm_per_token * padded
        cpu = self.fixed_s + self.per_seq_s * n
        k, floor = (gpu, cpu) if self.overlap else (gpu + cpu, 0.0)
        f1 = self.attn_flops_per_ctx / self.attn_flops_per_s
        m0 = self.kv_bytes_per_token * n / self.bytes_per_s
        m1 = self.kv_bytes_per_token / self.bytes_per_s
        return DecodeCoeffs(k, f1, k + m0, m1, 0.0, floor)
