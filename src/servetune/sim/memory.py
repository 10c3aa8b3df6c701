"""The start-up memory plan, with vLLM (V1) semantics.

vLLM profiles one forward pass of ``max_num_batched_tokens`` tokens (plus a sampler pass over
``max_num_seqs`` rows of logits) and gives the KV cache what is left of
``gpu_memory_utilization × total`` after the weights, that activation peak and the memory
outside torch (CUDA context, NCCL buffers)::

    kv = total × util − weights − activation_peak − non_torch
    num_gpu_blocks = kv // (block_size × kv_bytes_per_token)

then refuses to start when one ``max_model_len`` sequence does not fit ("To serve at least one
request with the model's max seq len ..."). CUDA graphs are captured after the KV cache is
allocated, from the memory outside the utilisation budget, so a utilisation too close to 1
fails there (an out-of-memory error at capture).

Constants fitted to vLLM's own start-up logs (``published_cases.json``, ``kv-*`` rows):
activation per token = 3 × (intermediate/tp + hidden) × 2 bytes, which gives the 0.92 GiB the
RTX 3090 log shows between max_model_len 20000 and 29000 (chunked prefill off, so the profile
ran max_model_len tokens), and 2.06 GiB at 20000; logits = max_num_seqs × vocab × 4 bytes;
non-torch 0.15 GiB (+0.22 GiB of collective buffers when TP > 1), which reproduce the 0.55 and
0.67 GiB of non-KV overhead of the A100 TP1/TP2 logs at two utilisations.
"""

from __future__ import annotations

import math

from pydantic import BaseModel

from servetune.errors import SimError
from servetune.sim.config import GIB, EngineConfig, ResolvedConfig

_NON_TORCH_GIB = 0.15
_NON_TORCH_TP_GIB = 0.22
_WEIGHTS_EXTRA_GIB = 0.06
_CUDA_CONTEXT_GIB = 0.5
_ACT_BYTES = 2.0
_LOGIT_BYTES = 4.0


class MemoryPlan(BaseModel):
    """Where one GPU's memory goes (GiB unless said otherwise), as vLLM would plan it."""

    total_gib: float
    requested_gib: float
    """total × gpu_memory_utilization."""
    weights_gib: float
    activation_peak_gib: float
    non_torch_gib: float
    cuda_graph_gib: float
    """Captured after the KV cache, outside the utilisation budget."""
    kv_cache_gib: float
    kv_bytes_per_token: float
    """Per GPU (this GPU's KV heads)."""
    block_size: int
    num_gpu_blocks: int
    kv_cache_tokens: int
    max_model_len: int
    max_concurrency: float
    """kv_cache_tokens / max_model_len, as vLLM prints it."""

    def max_concurrency_for(self, tokens_per_request: int) -> float:
        """How many requests of this many tokens (prompt + output) the KV pool holds."""
        blocks = math.ceil(max(1, tokens_per_request) / self.block_size)
        return self.num_gpu_blocks / blocks

    def log_lines(self) -> list[str]:
        """What vLLM prints at start-up for the same numbers."""
        return [
            f"Model loading took {self.weights_gib:.4f} GiB",
            f"Available KV cache memory: {self.kv_cache_gib:.2f} GiB",
            f"GPU KV cache size: {self.kv_cache_tokens:,} tokens",
            f"# GPU blocks: {self.num_gpu_blocks}",
            f"Maximum concurrency for {self.max_model_len:,} tokens per request: "
            f"{self.max_concurrency:.2f}x",
            f"Graph capturing took {self.cuda_graph_gib:.2f} GiB",
        ]


def weights_bytes(r: ResolvedConfig) -> float:
    """Weight bytes on one GPU: quantized linear layers, bf16 embeddings/lm_head/norms."""
    m = r.model
    linear = m.num_hidden_layers * m.layer_linear_params * r.weight_bytes_per_param
    other = (m.param_count - m.num_hidden_layers * m.layer_linear_params) * 2.0
    return (linear + other) / r.tensor_parallel_size + _WEIGHTS_EXTRA_GIB * GIB / (
        r.tensor_parallel_size
    )


def activation_peak_bytes(r: ResolvedConfig) -> float:
    m = r.model
    tp = r.tensor_parallel_size
    per_token = 3.0 * (m.intermediate_size / tp + m.hidden_size) * _ACT_BYTES
    logits = r.max_num_seqs * m.vocab_size * _LOGIT_BYTES
    return r.max_num_batched_tokens * per_token + logits


def plan_resolved(r: ResolvedConfig) -> MemoryPlan:
    total = r.gpu.usable_gib * GIB
    requested = total * r.gpu_memory_utilization
    weights = weights_bytes(r)
    act = activation_peak_bytes(r)
    non_torch = (_NON_TORCH_GIB + (_NON_TORCH_TP_GIB if r.tensor_parallel_size > 1 else 0.0)) * GIB
    graphs = (0.35 + 0.005 * r.model.num_hidden_layers) * GIB
    kv_per_token = r.model.kv_bytes_per_token(r.kv_dtype_bytes, r.tensor_parallel_size)
    where = f"on {r.gpu.name} ({r.gpu.usable_gib:g} GiB, TP={r.tensor_parallel_size})"

    if weights > total - _CUDA_CONTEXT_GIB * GIB:
        raise SimError(
            f"CUDA out of memory while loading the model: the weights of {r.model.name} need "
            f"{weights / GIB:.2f} GiB per GPU {where}.",
            hint="quantize (--quantization fp8 or awq), raise --tensor-parallel-size, "
            "or use a GPU with more memory",
        )
    free_at_start = total - _CUDA_CONTEXT_GIB * GIB
    if requested > free_at_start:
        raise SimError(
            f"Free memory on device ({free_at_start / GIB:.2f}/{total / GIB:.2f} GiB) on "
            f"startup is less than desired GPU memory utilization "
            f"({r.gpu_memory_utilization:g}, {requested / GIB:.2f} GiB). Decrease GPU memory "
            "utilization or reduce GPU memory used by other processes.",
            hint=f"lower --gpu-memory-utilization to at most "
            f"{math.floor(free_at_start / total * 100) / 100:.2f}",
        )
    kv = requested - weights - act - non_torch
    if kv <= 0:
        raise SimError(
            "No available memory for the cache blocks. Try increasing "
            "`gpu_memory_utilization` when initializing the engine. "
            f"(weights {weights / GIB:.2f} GiB + activations {act / GIB:.2f} GiB + other "
            f"{non_torch / GIB:.2f} GiB exceed {requested / GIB:.2f} GiB {where})",
            hint="raise --gpu-memory-utilization, lower --max-num-batched-tokens, quantize "
            "(--quantization fp8/awq) or raise --tensor-parallel-size",
        )
    block_bytes = kv_per_token * r.block_size
    blocks = int(kv // block_bytes)
    tokens = blocks * r.block_size
    needed = math.ceil(r.max_model_len / r.block_size) * block_bytes
    if needed > kv:
        est = blocks * r.block_size
        raise SimError(
            "To serve at least one request with the model's max seq len "
            f"({r.max_model_len}), ({needed / GIB:.2f} GiB KV cache is needed, which is "
            f"larger than the available KV cache memory ({kv / GIB:.2f} GiB). Based on the "
            f"available memory, the estimated maximum model length is {est}. Try increasing "
            "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the "
            "engine.",
            hint=f"lower --max-model-len to ≤ {est}, raise --gpu-memory-utilization, use "
            "--kv-cache-dtype fp8, quantize, or raise --tensor-parallel-size",
        )
    if total - requested < graphs + _CUDA_CONTEXT_GIB * GIB:
        raise SimError(
            "CUDA out of memory during CUDA graph capture: "
            f"{(total - requested) / GIB:.2f} GiB are left outside gpu_memory_utilization "
            f"({r.gpu_memory_utilization:g}) but capture needs about "
            f"{(graphs + _CUDA_CONTEXT_GIB * GIB) / GIB:.2f} GiB {where}.",
            hint="lower --gpu-memory-utilization (e.g. to 0.9)",
        )
    return MemoryPlan(
        total_gib=total / GIB,
        requested_gib=requested / GIB,
        weights_gib=weights / GIB,
        activation_peak_gib=act / GIB,
        non_torch_gib=non_torch / GIB,
        cuda_graph_gib=graphs / GIB,
        kv_cache_gib=kv / GIB,
        kv_bytes_per_token=kv_per_token,
        block_size=r.block_size,
        num_gpu_blocks=blocks,
        kv_cache_tokens=tokens,
        max_model_len=r.max_model_len,
        max_concurrency=tokens / r.max_model_len,
    )


def plan_memory(cfg: EngineConfig | ResolvedConfig) -> MemoryPlan:
    """vLLM's start-up memory plan for ``cfg``; raises SimError where vLLM refuses to start."""
    r = cfg.resolve() if isinstance(cfg, EngineConfig) else cfg
    return plan_resolved(r)
