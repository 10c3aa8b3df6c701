"""The engine configuration a run was measured with, as far as it is known.

Known from the simulated engine's own record (``run.json`` → ``target.simulated``), or from a
command line the user passes (``diagnose RUN_DIR --config "vllm serve …"``); otherwise
unknown, and the rules that need a knob's value say so instead of assuming vLLM's default.
With the GPU and the model known too, the configuration becomes an
:class:`~servetune.sim.config.EngineConfig`, and actions can quote the memory planner's
before/after figures (KV pool tokens) for a change.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from servetune.errors import ServetuneError
from servetune.results.schema import RunResult
from servetune.sim.config import EngineConfig

# Engine-neutral knob (servetune.engines.knobs) -> EngineConfig field.
KNOB_TO_ENGINE_FIELD: dict[str, str] = {
    "max_num_seqs": "max_num_seqs",
    "max_num_batched_tokens": "max_num_batched_tokens",
    "max_model_len": "max_model_len",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "chunked_prefill": "enable_chunked_prefill",
    "quantization": "quantization",
    "kv_cache_dtype": "kv_cache_dtype",
    "tensor_parallel_size": "tensor_parallel_size",
    "long_prefill_token_threshold": "long_prefill_token_threshold",
}
KNOB_FLAG_NAMES: dict[str, str] = {
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


class KnownConfig(BaseModel):
    """What is known of the engine's configuration for one run."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    source: str = "unknown"
    """Where the values come from ("simulated engine record", "--config", "unknown")."""
    engine: str = "vllm"
    gpu: str | None = None
    model: str | None = None
    values: dict[str, Any] = Field(default_factory=dict)
    """Engine-neutral knob → value (only the ones known)."""
    kv_pool_tokens: int | None = None
    """Tokens the KV pool holds (vLLM's "GPU KV cache size"), when known."""
    defaults_assumed: dict[str, Any] = Field(default_factory=dict)
    """Knobs not given on the command line, filled with vLLM's default for this GPU."""
    engine_config: EngineConfig | None = Field(default=None, exclude=True)
    """The full configuration, for memory-planner what-ifs (needs the GPU and the model)."""

    def get(self, knob: str) -> Any:
        return self.values.get(knob)

    @property
    def known(self) -> bool:
        return bool(self.values)


def _engine_from_values(gpu: str, model: str, values: dict[str, Any]) -> EngineConfig | None:
    fields: dict[str, Any] = {"gpu": gpu, "model": model}
    for knob, field in KNOB_TO_ENGINE_FIELD.items():
        if values.get(knob) is not None and field in EngineConfig.model_fields:
            fields[field] = values[knob]
    try:
        return EngineConfig(**fields)
    except (ValueError, ServetuneError):
        return None


def from_simulated(info: dict[str, Any]) -> KnownConfig:
    """The configuration the simulated engine recorded in ``target.simulated``."""
    values: dict[str, Any] = {}
    for knob, field in KNOB_TO_ENGINE_FIELD.items():
        if field in info:
            values[knob] = info[field]
    if "enable_prefix_caching" in info:
        values["prefix_caching"] = info["enable_prefix_caching"]
    memory = info.get("memory") or {}
    pool = memory.get("kv_cache_tokens")
    gpu, model = info.get("gpu"), info.get("model")
    ec = _engine_from_values(gpu, model, values) if gpu and model else None
    return KnownConfig(
        source="the simulated engine's record (run.json)",
        engine="vllm",
        gpu=gpu,
        model=model,
        values=values,
        kv_pool_tokens=int(pool) if pool is not None else None,
        engine_config=ec,
    )


def from_engine_config(
    cfg: EngineConfig, explicit: set[str] | None = None, gpu_known: bool = True
) -> KnownConfig:
    """From a parsed command line. ``explicit``: the EngineConfig fields given on it; the
    rest take vLLM's defaults for the GPU when the GPU is known, else stay unknown."""
    from servetune.sim.memory import plan_memory

    explicit = explicit if explicit is not None else set(cfg.model_fields_set)
    values: dict[str, Any] = {}
    assumed: dict[str, Any] = {}
    pool: int | None = None
    resolved = None
    if gpu_known:
        try:
            resolved = cfg.resolve()
        except ServetuneError:
            resolved = None
    for knob, field in KNOB_TO_ENGINE_FIELD.items():
        if field in explicit:
            values[knob] = getattr(cfg, field)
        elif resolved is not None and hasattr(resolved, field):
            values[knob] = getattr(resolved, field)
            assumed[knob] = values[knob]
    if resolved is not None:
        values["prefix_caching"] = resolved.enable_prefix_caching
        try:
            pool = plan_memory(resolved).kv_cache_tokens
        except ServetuneError:
            pool = None
    return KnownConfig(
        source="--config",
        engine="vllm",
        gpu=cfg.gpu if gpu_known else None,
        model=cfg.model,
        values=values,
        kv_pool_tokens=pool,
        defaults_assumed=assumed,
        engine_config=cfg if gpu_known else None,
    )


def known_config(run: RunResult, override: KnownConfig | None = None) -> KnownConfig:
    """The configuration of ``run``: ``override`` (from --config) wins over the record; an
    override with only a GPU/model (--gpu/--model) fills the record's gaps instead."""
    if override is not None and override.known:
        return override
    recorded = _recorded(run)
    if override is not None:
        recorded = recorded.model_copy(
            update={
                "gpu": recorded.gpu or override.gpu,
                "model": recorded.model or override.model,
            }
        )
    return recorded


def _recorded(run: RunResult) -> KnownConfig:
    if run.target.simulated:
        return from_simulated(run.target.simulated)
    known = KnownConfig()
    if run.target.max_model_len:
        known.values["max_model_len"] = run.target.max_model_len
        known.source = "/v1/models (max_model_len only)"
    # the pool size the server reports (cache_config_info) is read by figures._knobs
    return known
