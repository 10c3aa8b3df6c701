"""The simulated engine's flags, spelled as ``vllm serve`` spells them, for every command
that starts or simulates the engine (``sim serve``, ``sim run``, ``bench`` without
``--base-url``). Cheap to import: argparse only."""

from __future__ import annotations

import argparse
from typing import Any

from servetune.sim.config import EngineConfig

_DEFAULT_GPU = "A100-80GB"
_DEFAULT_MODEL = "Qwen/Qwen2.5-7B-Instruct"


def _add(p: Any, *flags: str, **kw: Any) -> None:
    """Add a flag unless the parser already has it (bench owns ``--model``, ``--seed``)."""
    try:
        p.add_argument(*flags, **kw)
    except argparse.ArgumentError:
        pass


def add_engine_arguments(p: Any) -> None:
    """Engine knobs with vLLM's names; unset ones take vLLM V1's defaults."""
    _add(
        p,
        "--gpu",
        default=_DEFAULT_GPU,
        help=f"GPU from `servetune sim gpus` (default {_DEFAULT_GPU})",
    )
    _add(
        p,
        "--model",
        default=None,
        help=f"model from `servetune sim models`, a Hugging Face id, or a local config.json "
        f"(default {_DEFAULT_MODEL})",
    )
    _add(p, "--tensor-parallel-size", "-tp", type=int, default=1)
    _add(
        p,
        "--max-num-seqs",
        type=int,
        default=None,
        help="requests running at once (default: vLLM's, 256 or 1024 by GPU)",
    )
    _add(
        p,
        "--max-num-batched-tokens",
        type=int,
        default=None,
        help="token budget per step (default: vLLM's, 2048 or 8192 by GPU)",
    )
    _add(p, "--gpu-memory-utilization", type=float, default=0.9)
    _add(
        p,
        "--max-model-len",
        type=int,
        default=None,
        help="context cap (default: the model's max_position_embeddings)",
    )
    _add(
        p,
        "--enable-chunked-prefill",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="split long prefills into chunks (vLLM V1 default: on)",
    )
    _add(
        p,
        "--enable-prefix-caching",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="reuse KV blocks of shared prompt prefixes (vLLM V1 default: on)",
    )
    _add(
        p,
        "--quantization",
        "-q",
        choices=["fp8", "awq", "gptq", "awq_marlin", "gptq_marlin"],
        default=None,
        help="weight quantization (default: bf16 weights)",
    )
    _add(p, "--kv-cache-dtype", choices=["auto", "fp8", "fp8_e4m3", "fp8_e5m2"], default="auto")
    _add(p, "--block-size", type=int, default=16)
    _add(
        p,
        "--long-prefill-token-threshold",
        type=int,
        default=0,
        help="cap on one request's prefill chunk per step (0 = none; V1 default)",
    )
    _add(p, "--served-model-name", default=None)
    _add(
        p,
        "--interconnect-gb-s",
        type=float,
        default=None,
        help="(not a vLLM flag) all-reduce bandwidth between the GPUs, GB/s, when it is not "
        "the catalog's",
    )


def engine_config_from_args(args: argparse.Namespace) -> EngineConfig:
    """An EngineConfig from parsed flags (absent flags keep vLLM's defaults)."""
    fields: dict[str, Any] = {
        "gpu": getattr(args, "gpu", None) or _DEFAULT_GPU,
        "model": getattr(args, "model", None) or _DEFAULT_MODEL,
        "tensor_parallel_size": getattr(args, "tensor_parallel_size", 1) or 1,
        "max_num_seqs": getattr(args, "max_num_seqs", None),
        "max_num_batched_tokens": getattr(args, "max_num_batched_tokens", None),
        "gpu_memory_utilization": getattr(args, "gpu_memory_utilization", 0.9),
        "max_model_len": getattr(args, "max_model_len", None),
        "enable_chunked_prefill": getattr(args, "enable_chunked_prefill", None),
        "enable_prefix_caching": getattr(args, "enable_prefix_caching", None),
        "quantization": getattr(args, "quantization", None),
        "kv_cache_dtype": getattr(args, "kv_cache_dtype", "auto") or "auto",
        "block_size": getattr(args, "block_size", 16) or 16,
        "long_prefill_token_threshold": getattr(args, "long_prefill_token_threshold", 0) or 0,
        "served_model_name": getattr(args, "served_model_name", None),
        "interconnect_gb_s": getattr(args, "interconnect_gb_s", None),
    }
    return EngineConfig(**fields)
