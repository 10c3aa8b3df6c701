"""The engine configuration a run was measured with, as far as it is known.

Known, in this order of precedence:

1. a command line the user passes (``diagnose RUN_DIR --server-cmd "vllm serve …"``);
2. the server command recorded with the run (a sweep's ``--server-cmd``);
3. the simulated engine's own record (``run.json`` → ``target.simulated``);
4. what the server itself says: vLLM's ``cache_config_info`` (the KV pool, the memory share,
   the KV dtype) and ``/v1/models`` (``max_model_len``).

A knob none of these gives is *unknown*, and the rules that need it say so — never a value
guessed from what the run happened to show (a short run's peak of running requests is not the
server's cap). Knob names and command lines are the registry's (:mod:`servetune.knobs`). With
the GPU and the model known too, the configuration becomes an
:class:`~servetune.sim.config.EngineConfig`, and actions can quote the memory planner's
before/after figures (KV pool tokens) for a change.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from servetune.errors import ServetuneError
from servetune.knobs import KNOB_NAMES, KnobValue, ParsedCommand, parse_command
from servetune.profiles import profile
from servetune.results.schema import RunResult
from servetune.sim.config import SIM_KNOBS, EngineConfig

_KV_ALIASES = {"bfloat16": "auto", "float16": "auto", "half": "auto", "bf16": "auto"}
"""KV dtypes that are the model's own 16-bit type: the memory planner's ``auto``."""


class KnownConfig(BaseModel):
    """What is known of the engine's configuration for one run."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    source: str = "unknown"
    """Where the values come from ("simulated engine record", "--server-cmd", "unknown")."""
    engine: str = "vllm"
    gpu: str | None = None
    model: str | None = None
    values: dict[str, KnobValue | None] = Field(default_factory=dict)
    """Engine-neutral knob (the registry's name) → value (only the ones known; None: known
    to be unset, e.g. no quantization)."""
    kv_pool_tokens: int | None = None
    """Tokens the KV pool holds (vLLM's "GPU KV cache size"), when known."""
    defaults_assumed: dict[str, KnobValue | None] = Field(default_factory=dict)
    """Knobs not given on the command line, filled with vLLM's default for this GPU."""
    engine_config: EngineConfig | None = Field(default=None, exclude=True)
    """The full configuration, for memory-planner what-ifs (needs the GPU and the model)."""

    def get(self, knob: str) -> KnobValue | None:
        return self.values.get(knob)

    def number(self, knob: str) -> float | None:
        """A numeric knob's value; None when it is unknown (or not a number)."""
        v = self.values.get(knob)
        return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None

    @property
    def known(self) -> bool:
        return bool(self.values)


def _engine_from_values(
    gpu: str, model: str, values: dict[str, Any], engine: str = "vllm"
) -> EngineConfig | None:
    fields: dict[str, Any] = {"gpu": gpu, "model": model, "engine": engine}
    fields.update({k: values[k] for k in SIM_KNOBS if values.get(k) is not None})
    try:
        return EngineConfig(**fields)
    except (ValueError, ServetuneError):
        return None


def from_simulated(info: dict[str, Any]) -> KnownConfig:
    """The configuration the simulated engine recorded in ``target.simulated``."""
    values = {k: info[k] for k in KNOB_NAMES if k in info}
    memory = info.get("memory") or {}
    pool = memory.get("kv_cache_tokens")
    gpu, model = info.get("gpu"), info.get("model")
    engine = str(info.get("simulates") or "vllm")  # the engine whose semantics it ran
    ec = _engine_from_values(gpu, model, values, engine) if gpu and model else None
    return KnownConfig(
        source="the simulated engine's record (run.json)",
        engine="sim",
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
    for knob in SIM_KNOBS:
        if knob in explicit:
            values[knob] = getattr(cfg, knob)
        elif resolved is not None and hasattr(resolved, knob):
            values[knob] = getattr(resolved, knob)
            assumed[knob] = values[knob]
    if resolved is not None:
        try:
            pool = plan_memory(resolved).kv_cache_tokens
        except ServetuneError:
            pool = None
    return KnownConfig(
        source="--server-cmd",
        engine="vllm",
        gpu=cfg.gpu if gpu_known else None,
        model=cfg.model,
        values=values,
        kv_pool_tokens=pool,
        defaults_assumed=assumed,
        engine_config=cfg if gpu_known else None,
    )


def planner_fields(parsed: ParsedCommand) -> tuple[dict[str, Any], list[str]]:
    """The EngineConfig fields of a parsed vLLM command line, and what the memory planner
    cannot model (said, not silently dropped)."""
    fields: dict[str, Any] = {}
    unsupported: list[str] = []
    for knob, value in parsed.values.items():
        if knob not in SIM_KNOBS:
            unsupported.append(f"{knob} = {value}: not modelled by the memory planner")
            continue
        fields[knob] = value
    kv = fields.get("kv_cache_dtype")
    if isinstance(kv, str):
        fields["kv_cache_dtype"] = _KV_ALIASES.get(kv, kv)
    for knob in ("quantization", "kv_cache_dtype"):
        given = fields.get(knob)
        if given is None:
            continue
        try:
            EngineConfig(**{knob: given})
        except ValueError:
            unsupported.append(
                f"{knob} = {given}: the memory planner models "
                + (
                    "fp8, awq and gptq only; planned as bf16 weights (the pool is underestimated)"
                    if knob == "quantization"
                    else "auto and fp8; planned as auto"
                )
            )
            del fields[knob]
    if parsed.model:
        fields["model"] = parsed.model
    if parsed.served_model_name:
        fields["served_model_name"] = parsed.served_model_name
    return fields, unsupported


def from_command(
    command: str | list[str],
    gpu: str | None = None,
    model: str | None = None,
    source: str = "the recorded server command",
) -> KnownConfig:
    """The configuration of a server command line (any engine the knob registry reads);
    with the GPU and a vLLM-like engine, also the planner's EngineConfig, vLLM's defaults for
    the knobs not given, and the KV pool."""
    parsed = parse_command(command)
    values = dict(parsed.values)
    name = model or parsed.model
    known = KnownConfig(
        source=source,
        engine=parsed.engine,
        gpu=gpu,
        model=name,
        values=values,
    )
    if gpu and name and profile(parsed.engine).memory_model:
        fields, _ = planner_fields(parsed)
        fields.update(gpu=gpu, model=name)
        try:
            cfg = EngineConfig(**fields)
            full = from_engine_config(cfg, explicit=set(parsed.values))
        except (ValueError, ServetuneError):
            return known
        full.values.update(values)
        return full.model_copy(update={"source": known.source, "engine": parsed.engine})
    return known


def known_config(run: RunResult, override: KnownConfig | None = None) -> KnownConfig:
    """The configuration of ``run``: ``override`` (from --server-cmd) wins over the record; an
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
    server = run.server.summary if run.server is not None else {}
    sources: list[str] = []
    if run.target.max_model_len:
        known.values["max_model_len"] = run.target.max_model_len
        sources.append("/v1/models (max_model_len)")
    for key in ("gpu_memory_utilization", "kv_cache_dtype", "block_size"):
        skey = "kv_block_size" if key == "block_size" else key
        if server.get(skey) is not None:
            known.values[key] = server[skey]
            sources.append(f"the server's cache_config_info ({key})")
    if isinstance(server.get("max_num_seqs"), int):
        known.values["max_num_seqs"] = server["max_num_seqs"]
        sources.append("the server's /props (total_slots)")
    if run.server is not None and run.server.engine:
        known.engine = run.server.engine
    if sources:
        known.source = "; ".join(sources)
    # the pool size the server reports (cache_config_info) is read by figures._knobs
    return known
