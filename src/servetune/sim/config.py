"""EngineConfig: the simulated engine's knobs, named and defaulted as vLLM (V1) names them.

A knob left unset takes the value vLLM V1 gives it, so a configuration found on the simulator
is a ``vllm serve`` command line (:meth:`EngineConfig.vllm_args`).

Defaults, as vLLM's ``EngineArgs.get_batch_defaults`` decides them for the OpenAI API server
(``vllm serve``; vllm/engine/arg_utils.py, v0.10–v0.11): on a device with at least 70 GiB whose
name does not contain "a100" (H100, H200, B200, MI300X) ``max_num_batched_tokens`` = 8192 and
``max_num_seqs`` = 1024; on every other device 2048 and 256 (A100 is excluded on purpose: a
large token budget lowered its throughput, vLLM PR #17885). The offline ``LLM`` class uses
16384/1024 and 8192/256 (``usage_context="llm"``). V1 enables chunked prefill and prefix
caching by default; ``max_model_len`` defaults to the model's ``max_position_embeddings``;
``gpu_memory_utilization`` to 0.9; ``block_size`` to 16. With chunked prefill off, the token
budget must cover one whole ``max_model_len`` prompt, so the default becomes
max(max_model_len, default) (vLLM's SchedulerConfig rule).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from servetune.errors import SimError
from servetune.sim.catalog import GpuSpec, ModelSpec, find_gpu, find_model

Quantization = Literal["fp8", "awq", "gptq", "awq_marlin", "gptq_marlin"]
KvCacheDtype = Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2"]
UsageContext = Literal["openai_api_server", "llm_class"]

GIB = 1024**3
_LARGE_DEVICE_GIB = 70


class EngineConfig(BaseModel):
    """The simulated engine's configuration, with vLLM's names (None = vLLM's default)."""

    model_config = ConfigDict(extra="forbid")

    gpu: str = "A100-80GB"
    model: str = "Qwen/Qwen2.5-7B-Instruct"
    tensor_parallel_size: int = 1
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    gpu_memory_utilization: float = 0.9
    max_model_len: int | None = None
    enable_chunked_prefill: bool | None = None
    enable_prefix_caching: bool | None = None
    quantization: Quantization | None = None
    kv_cache_dtype: KvCacheDtype = "auto"
    block_size: int = 16
    long_prefill_token_threshold: int = 0
    """V1: cap on one request's prefill chunk per step (0 = none), so that a long prompt being
    chunked leaves budget for the requests behind it."""
    usage_context: UsageContext = "openai_api_server"
    served_model_name: str | None = None
    seed: int = 0
    interconnect_gb_s: float | None = None
    """Hardware override, not a vLLM flag: the GPUs' all-reduce bandwidth (GB/s) when it is
    not the catalog's (e.g. TP across containers that fall back to sockets)."""

    def resolve(self) -> ResolvedConfig:
        """Look up the GPU and model, apply vLLM's defaults and check the knobs."""
        return resolve(self)

    def vllm_args(self) -> list[str]:
        """The ``vllm serve`` flags this configuration sets explicitly."""
        r = self.resolve()
        args = [
            r.model.name,
            "--tensor-parallel-size",
            str(r.tensor_parallel_size),
            "--max-num-seqs",
            str(r.max_num_seqs),
            "--max-num-batched-tokens",
            str(r.max_num_batched_tokens),
            "--gpu-memory-utilization",
            f"{r.gpu_memory_utilization:g}",
            "--max-model-len",
            str(r.max_model_len),
            "--block-size",
            str(r.block_size),
            "--kv-cache-dtype",
            r.kv_cache_dtype,
        ]
        args.append(
            "--enable-chunked-prefill"
            if r.enable_chunked_prefill
            else "--no-enable-chunked-prefill"
        )
        args.append(
            "--enable-prefix-caching" if r.enable_prefix_caching else "--no-enable-prefix-caching"
        )
        if r.quantization:
            args += ["--quantization", r.quantization]
        if r.long_prefill_token_threshold:
            args += ["--long-prefill-token-threshold", str(r.long_prefill_token_threshold)]
        return args


class ResolvedConfig(BaseModel):
    """An EngineConfig with every default applied and the catalog entries looked up."""

    model_config = ConfigDict(frozen=True)

    gpu: GpuSpec
    model: ModelSpec
    served_model_name: str
    tensor_parallel_size: int
    max_num_seqs: int
    max_num_batched_tokens: int
    gpu_memory_utilization: float
    max_model_len: int
    enable_chunked_prefill: bool
    enable_prefix_caching: bool
    quantization: str | None
    kv_cache_dtype: str
    block_size: int
    long_prefill_token_threshold: int
    seed: int
    interconnect_gb_s: float
    defaults_applied: dict[str, Any]
    """Knobs the user left unset and the value vLLM's rule gave them."""

    @property
    def weight_bytes_per_param(self) -> float:
        return weight_bytes_per_param(self.quantization)

    @property
    def kv_dtype_bytes(self) -> float:
        return 1.0 if self.kv_cache_dtype.startswith("fp8") else 2.0

    def summary(self) -> dict[str, Any]:
        """The configuration for TargetInfo.simulated and run.json."""
        return {
            "engine": "servetune-sim",
            "gpu": self.gpu.name,
            "model": self.model.name,
            "tensor_parallel_size": self.tensor_parallel_size,
            "max_num_seqs": self.max_num_seqs,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "max_model_len": self.max_model_len,
            "enable_chunked_prefill": self.enable_chunked_prefill,
            "enable_prefix_caching": self.enable_prefix_caching,
            "quantization": self.quantization,
            "kv_cache_dtype": self.kv_cache_dtype,
            "block_size": self.block_size,
            "long_prefill_token_threshold": self.long_prefill_token_threshold,
            "interconnect_gb_s": self.interconnect_gb_s,
            "defaults_applied": self.defaults_applied,
        }


def weight_bytes_per_param(quantization: str | None) -> float:
    """Bytes per quantized linear-layer weight (int4 includes fp16 group-128 scales)."""
    if quantization is None:
        return 2.0
    if quantization == "fp8":
        return 1.0
    return 0.5 + 4.0 / 128  # awq/gptq int4: 4 bits + an fp16 scale and zero per 128


def batch_defaults(gpu: GpuSpec, usage: UsageContext) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) as vLLM V1 picks them for this device."""
    large = gpu.usable_gib >= _LARGE_DEVICE_GIB and "a100" not in gpu.name.lower()
    if large:
        return (8192, 1024) if usage == "openai_api_server" else (16384, 1024)
    return (2048, 256) if usage == "openai_api_server" else (8192, 256)


def resolve(cfg: EngineConfig) -> ResolvedConfig:
    gpu = find_gpu(cfg.gpu)
    model = find_model(cfg.model)
    applied: dict[str, Any] = {}
    tp = cfg.tensor_parallel_size
    if tp < 1:
        raise SimError(f"--tensor-parallel-size must be ≥ 1 (got {tp})", hint="use 1, 2, 4 or 8")
    if model.num_attention_heads % tp:
        raise SimError(
            f"Total number of attention heads ({model.num_attention_heads}) must be divisible "
            f"by tensor parallel size ({tp}).",
            hint="choose a --tensor-parallel-size that divides "
            f"{model.num_attention_heads} (e.g. "
            + ", ".join(str(d) for d in (1, 2, 4, 8) if model.num_attention_heads % d == 0)
            + ")",
        )
    if model.num_key_value_heads % tp and tp % model.num_key_value_heads:
        raise SimError(
            f"Total number of key/value heads ({model.num_key_value_heads}) and tensor "
            f"parallel size ({tp}) must divide one another.",
            hint="choose a --tensor-parallel-size that divides the KV heads or a multiple",
        )
    util = cfg.gpu_memory_utilization
    if not 0 < util <= 1:
        raise SimError(
            f"gpu_memory_utilization must be in (0, 1] (got {util:g}).",
            hint="--gpu-memory-utilization is the share of GPU memory vLLM may use, e.g. 0.9",
        )
    max_model_len = cfg.max_model_len
    if max_model_len is None:
        max_model_len = model.max_position_embeddings
        applied["max_model_len"] = max_model_len
    if max_model_len < 1:
        raise SimError(f"--max-model-len must be ≥ 1 (got {max_model_len})")
    if max_model_len > model.max_position_embeddings:
        raise SimError(
            f"User-specified max_model_len ({max_model_len}) is greater than the derived "
            f"max_model_len (max_position_embeddings={model.max_position_embeddings} in "
            "model's config.json).",
            hint=f"lower --max-model-len to at most {model.max_position_embeddings}",
        )
    chunked = cfg.enable_chunked_prefill
    if chunked is None:
        chunked = True
        applied["enable_chunked_prefill"] = True
    prefix = cfg.enable_prefix_caching
    if prefix is None:
        prefix = True
        applied["enable_prefix_caching"] = True
    default_tokens, default_seqs = batch_defaults(gpu, cfg.usage_context)
    max_num_seqs = cfg.max_num_seqs
    if max_num_seqs is None:
        max_num_seqs = default_seqs
        applied["max_num_seqs"] = max_num_seqs
    if max_num_seqs < 1:
        raise SimError(f"--max-num-seqs must be ≥ 1 (got {max_num_seqs})")
    mnbt = cfg.max_num_batched_tokens
    if mnbt is None:
        mnbt = default_tokens if chunked else max(max_model_len, default_tokens)
        applied["max_num_batched_tokens"] = mnbt
    if mnbt < 1:
        raise SimError(f"--max-num-batched-tokens must be ≥ 1 (got {mnbt})")
    if not chunked and mnbt < max_model_len:
        raise SimError(
            f"max_num_batched_tokens ({mnbt}) is smaller than max_model_len "
            f"({max_model_len}). This effectively limits the maximum sequence length to "
            "max_num_batched_tokens and makes vLLM reject longer sequences. Please increase "
            "max_num_batched_tokens or decrease max_model_len.",
            hint=f"raise --max-num-batched-tokens to ≥ {max_model_len}, lower --max-model-len, "
            "or turn on --enable-chunked-prefill",
        )
    if mnbt < max_num_seqs:
        raise SimError(
            f"max_num_batched_tokens ({mnbt}) must be greater than or equal to "
            f"max_num_seqs ({max_num_seqs}).",
            hint="raise --max-num-batched-tokens or lower --max-num-seqs",
        )
    if cfg.block_size not in (1, 8, 16, 32, 64, 128):
        raise SimError(f"--block-size must be one of 1, 8, 16, 32, 64, 128 (got {cfg.block_size})")
    if cfg.long_prefill_token_threshold < 0:
        raise SimError("--long-prefill-token-threshold must be ≥ 0")
    if cfg.interconnect_gb_s is not None and not cfg.interconnect_gb_s > 0:
        raise SimError(f"--interconnect-gb-s must be > 0 (got {cfg.interconnect_gb_s})")
    return ResolvedConfig(
        gpu=gpu,
        model=model,
        served_model_name=cfg.served_model_name or model.name,
        tensor_parallel_size=tp,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=mnbt,
        gpu_memory_utilization=util,
        max_model_len=max_model_len,
        enable_chunked_prefill=chunked,
        enable_prefix_caching=prefix,
        quantization=cfg.quantization,
        kv_cache_dtype=cfg.kv_cache_dtype,
        block_size=cfg.block_size,
        long_prefill_token_threshold=cfg.long_prefill_token_threshold,
        seed=cfg.seed,
        interconnect_gb_s=cfg.interconnect_gb_s or gpu.interconnect_gb_s,
        defaults_applied=applied,
    )
