"""Engine-neutral knobs and, as data, the flag each engine spells them with.

The names are vLLM's (the engine most users tune); every other engine's equivalent is in
:data:`KNOB_FLAGS`, with ``None`` where the engine has no such knob. Diagnose prints the
equivalents with :func:`knob_flag`; the command builders render them.

Mappings that are not one flag for one value, written down once here:

- llama.cpp ``-c`` is the TOTAL context of the server, split evenly over the ``-np`` slots,
  so ``max_model_len`` (per request, vLLM's meaning) becomes ``-c max_model_len × max_num_seqs``.
- llama.cpp ``kv_cache_dtype`` sets both ``-ctk`` and ``-ctv``; ``auto`` keeps the default (f16).
- SGLang has chunked prefill on by default; ``chunked_prefill=False`` is
  ``--chunked-prefill-size -1``. Its per-step budget closest to ``max_num_batched_tokens`` is
  ``--max-prefill-tokens``.
- ``long_prefill_token_threshold`` (vLLM V1: a cap on one request's prefill chunk per step,
  so a long prompt leaves budget for the ones behind it) is vLLM's alone. SGLang's server
  arguments (docs/advanced_features/server_arguments.md, "Memory and scheduling") have the
  chunk size of chunked prefill (``--chunked-prefill-size``), the prefill batch's token and
  request caps (``--max-prefill-tokens``, ``--prefill-max-requests``) and PP-only dynamic
  chunking, but no per-request cap; TGI and llama.cpp have none either.
- TGI's closest to ``max_num_seqs`` is ``--max-batch-size``; to ``max_model_len``,
  ``--max-total-tokens`` (prompt + output of one request).
- vLLM's CPU build reads ``--gpu-memory-utilization`` as the fraction of CPU memory its worker
  reserves; an explicit KV pool size (``--kv-cache-memory-bytes``, the engine option
  ``cpu_kv_cache_gib``) is used instead when given.
"""

from __future__ import annotations

from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field

from servetune.errors import ConfigError

KNOB_NAMES: Final[tuple[str, ...]] = (
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_model_len",
    "gpu_memory_utilization",
    "chunked_prefill",
    "quantization",
    "kv_cache_dtype",
    "tensor_parallel_size",
    "long_prefill_token_threshold",
)


class EngineKnobs(BaseModel):
    """What a tuner changes, named as vLLM names it; ``None`` = the engine's default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_num_seqs: int | None = Field(None, ge=1, description="concurrent sequences per step")
    max_num_batched_tokens: int | None = Field(None, ge=1, description="tokens per step")
    max_model_len: int | None = Field(None, ge=1, description="prompt + output of one request")
    gpu_memory_utilization: float | None = Field(None, gt=0.0, le=1.0)
    chunked_prefill: bool | None = None
    quantization: str | None = None
    kv_cache_dtype: str | None = None
    tensor_parallel_size: int | None = Field(None, ge=1)
    long_prefill_token_threshold: int | None = Field(
        None, ge=0, description="cap on one request's prefill chunk per step (0 = none)"
    )

    def given(self) -> dict[str, Any]:
        """The knobs set, in :data:`KNOB_NAMES` order."""
        return {k: getattr(self, k) for k in KNOB_NAMES if getattr(self, k) is not None}


_VLLM: dict[str, str | None] = {
    "max_num_seqs": "--max-num-seqs",
    "max_num_batched_tokens": "--max-num-batched-tokens",
    "max_model_len": "--max-model-len",
    "gpu_memory_utilization": "--gpu-memory-utilization",
    "chunked_prefill": "--enable-chunked-prefill",
    "quantization": "--quantization",
    "kv_cache_dtype": "--kv-cache-dtype",
    "tensor_parallel_size": "--tensor-parallel-size",
    "long_prefill_token_threshold": "--long-prefill-token-threshold",
}

# engine -> knob -> the flag a user types (None: the engine has no such knob).
KNOB_FLAGS: Final[dict[str, dict[str, str | None]]] = {
    "vllm": dict(_VLLM),
    "vllm-cpu": dict(_VLLM),
    "sim": dict(_VLLM),
    "sglang": {
        "max_num_seqs": "--max-running-requests",
        "max_num_batched_tokens": "--max-prefill-tokens",
        "max_model_len": "--context-length",
        "gpu_memory_utilization": "--mem-fraction-static",
        "chunked_prefill": "--chunked-prefill-size",
        "quantization": "--quantization",
        "kv_cache_dtype": "--kv-cache-dtype",
        "tensor_parallel_size": "--tp-size",
        "long_prefill_token_threshold": None,
    },
    "tgi": {
        "max_num_seqs": "--max-batch-size",
        "max_num_batched_tokens": "--max-batch-prefill-tokens",
        "max_model_len": "--max-total-tokens",
        "gpu_memory_utilization": "--cuda-memory-fraction",
        "chunked_prefill": None,
        "quantization": "--quantize",
        "kv_cache_dtype": "--kv-cache-dtype",
        "tensor_parallel_size": "--num-shard",
        "long_prefill_token_threshold": None,
    },
    "llama.cpp": {
        "max_num_seqs": "-np",
        "max_num_batched_tokens": "-b",
        "max_model_len": "-c",
        "gpu_memory_utilization": None,
        "chunked_prefill": None,
        "quantization": None,
        "kv_cache_dtype": "-ctk/-ctv",
        "tensor_parallel_size": None,
        "long_prefill_token_threshold": None,
    },
}

# Why a knob is missing, or how its value is transformed: told with the flag or the error.
KNOB_NOTES: Final[dict[tuple[str, str], str]] = {
    ("llama.cpp", "max_model_len"): "-c is the total context over all -np slots: "
    "-c = max_model_len × max_num_seqs",
    ("llama.cpp", "kv_cache_dtype"): "sets both -ctk and -ctv (f16, q8_0, q4_0, ...)",
    ("llama.cpp", "quantization"): "llama.cpp's quantization is the GGUF file's: "
    "serve a quantized GGUF (e.g. Q4_K_M) instead",
    ("llama.cpp", "gpu_memory_utilization"): "llama.cpp sizes its KV cache from -c, "
    "not from a memory fraction",
    ("llama.cpp", "chunked_prefill"): "llama.cpp always splits prompts into -ub micro-batches",
    ("llama.cpp", "tensor_parallel_size"): "llama.cpp splits over GPUs with --split-mode, "
    "not tensor parallelism of a given size",
    ("vllm-cpu", "gpu_memory_utilization"): "on the CPU build, the fraction of CPU memory "
    "reserved for the worker (the KV pool is the rest of it); the engine option "
    "cpu_kv_cache_gib sets the pool directly instead",
    ("tgi", "chunked_prefill"): "TGI decides prefill chunking itself (on where supported)",
    ("sglang", "chunked_prefill"): "on by default; off is --chunked-prefill-size -1",
    ("tgi", "max_num_seqs"): "--max-batch-size caps the running batch",
    ("tgi", "max_model_len"): "--max-total-tokens = prompt + output of one request",
    ("sglang", "long_prefill_token_threshold"): "no per-request chunk cap; a smaller "
    "--chunked-prefill-size shortens the wait",
    ("tgi", "long_prefill_token_threshold"): "TGI schedules prefills itself",
    ("llama.cpp", "long_prefill_token_threshold"): "each slot's prompt is processed in -ub "
    "micro-batches",
}

ENGINE_NAMES: Final[tuple[str, ...]] = tuple(KNOB_FLAGS)


def check_engine(engine: str) -> str:
    if engine not in KNOB_FLAGS:
        raise ConfigError(
            f"unknown engine {engine!r}",
            hint=f"choose one of: {', '.join(ENGINE_NAMES)}",
        )
    return engine


def knob_flag(engine: str, knob: str) -> str | None:
    """The flag ENGINE spells KNOB with (e.g. ``("llama.cpp", "max_num_seqs") -> "-np"``),
    or ``None`` when the engine has no such knob."""
    flags = KNOB_FLAGS[check_engine(engine)]
    if knob not in flags:
        raise ConfigError(f"unknown knob {knob!r}", hint=f"knobs: {', '.join(KNOB_NAMES)}")
    return flags[knob]


def knob_note(engine: str, knob: str) -> str | None:
    """How ENGINE's flag for KNOB differs from vLLM's meaning, when it does."""
    return KNOB_NOTES.get((engine, knob))


def require_flag(engine: str, knob: str) -> str:
    """The flag, or a ConfigError naming the engine and the knob it lacks."""
    flag = knob_flag(engine, knob)
    if flag is None:
        note = knob_note(engine, knob)
        raise ConfigError(
            f"engine {engine} has no knob {knob}",
            hint=note or f"leave {knob} unset when launching {engine}",
        )
    return flag
