"""Which deployment the runs measured, as the simulator configures it.

From each run: the simulated engine's own record (``target.simulated``), else the server
command (given with ``--server-cmd``, or recorded by the sweep) read by the knob registry,
with the device (``--gpu``; a CPU build of an engine runs on ``cpu``) and the model (the
command's, or ``--model``: a catalog name or a config.json). Every run must be the same
deployment — engine, model, device, tensor-parallel size; the engine's knobs may differ
between runs (another ``--max-num-seqs`` is a question the profile can answer). What the
simulator cannot take from the command is said, never dropped silently.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from servetune.arch.cpu import cpu_device, device_of, is_cpu
from servetune.calibrate.evidence import RunEvidence
from servetune.diagnose.knobs import from_command, planner_fields
from servetune.errors import ConfigError, ServetuneError
from servetune.knobs import parse_command
from servetune.profiles import profile as find_profile
from servetune.results.calibration_file import DeviceSpec
from servetune.sim.config import SIM_KNOBS, EngineConfig


@dataclass
class Identified:
    """One run's configuration for the simulator."""

    engine_id: str
    """The engine's profile id (what ran)."""
    config: EngineConfig
    knobs: dict[str, Any]
    threads: int | None = None
    kv_pool_tokens: int | None = None
    notes: list[str] = field(default_factory=list)


def _sim_engine(engine_id: str) -> tuple[str, list[str]]:
    """The simulated engine whose semantics run ``engine_id``'s scheduler, and what that
    leaves out (the engine's profile says)."""
    prof = find_profile(engine_id)
    if prof.sim_semantics:
        return prof.id, []
    for other in prof.reads_as:
        if find_profile(other).sim_semantics:
            return other, []
    if prof.calibrated_as is not None:
        stand_in, note = prof.calibrated_as
        return stand_in, [note]
    raise ConfigError(
        f"the simulator has no model of {prof.display_name}'s scheduler",
        hint="calibrate on runs of an engine whose profile the simulator models (vLLM, its "
        "CPU build, SGLang, llama.cpp)",
        code="calibrate.unidentified",
    )


def _threads(parsed_values: dict[str, Any]) -> int | None:
    for key in ("threads", "omp_num_threads"):
        v = parsed_values.get(key)
        if isinstance(v, int) and v >= 1:
            return v
    return None


def from_simulated(ev: RunEvidence) -> Identified:
    info = dict(ev.run.target.simulated or {})
    model = str(info.get("model_path") or info.get("model"))
    fields: dict[str, Any] = {k: info[k] for k in SIM_KNOBS if info.get(k) is not None}
    fields.pop("calibration", None)
    engine = str(info.get("simulates") or "vllm")
    try:
        cfg = EngineConfig(engine=engine, gpu=str(info["gpu"]), model=model, **fields)
    except (ValueError, KeyError, ServetuneError) as exc:
        raise ConfigError(
            f"{ev.path}: the simulated engine's record cannot be read back ({exc})",
            hint="re-run the simulation with this servetune",
            code="calibrate.unidentified",
        ) from exc
    pool = (info.get("memory") or {}).get("kv_cache_tokens")
    knobs = {k: info.get(k) for k in SIM_KNOBS if k in info}
    return Identified(engine, cfg, knobs, kv_pool_tokens=int(pool) if pool else None)


def from_server_cmd(ev: RunEvidence, cmd: str, gpu: str | None, model: str | None) -> Identified:
    parsed = parse_command(cmd)
    engine_id = parsed.engine
    sim_engine, notes = _sim_engine(engine_id)
    threads = _threads(dict(parsed.values))
    device = gpu or ("cpu" if find_profile(engine_id).host_cpu else None)
    if device is None:
        raise ConfigError.over_fields(
            f"{ev.path}: which GPU did {engine_id} run on?",
            hint="give {gpu} (a name from `servetune sim gpus`, or cpu for a CPU build)",
            code="calibrate.unidentified",
        )
    if is_cpu(device) and threads and ":" not in device:
        device = f"cpu:{threads}" if threads > 1 else "cpu"
    name = model or parsed.model
    if not name:
        raise ConfigError.over_fields(
            f"{ev.path}: the server command names no model",
            hint="give {model} (a catalog name or the model's config.json)",
            code="calibrate.unidentified",
        )
    fields, unsupported = planner_fields(parsed)
    fields = {k: v for k, v in fields.items() if k in SIM_KNOBS}
    known = from_command(cmd, gpu=device, model=name)
    try:
        cfg = EngineConfig(engine=sim_engine, gpu=device, model=name, **fields)
        cfg.resolve()
    except (ValueError, ServetuneError) as exc:
        raise ConfigError.over_fields(
            f"{ev.path}: the simulator cannot take this deployment ({exc})",
            hint="check {gpu} and {model}; `servetune sim models` lists the catalog",
            code="calibrate.unidentified",
        ) from exc
    server = ev.run.server.summary if ev.run.server is not None else {}
    pool = server.get("kv_cache_tokens") or known.kv_pool_tokens
    notes = notes + [f"not simulated: {u}" for u in unsupported]
    return Identified(
        engine_id,
        cfg,
        dict(parsed.values),
        threads=threads,
        kv_pool_tokens=int(pool) if isinstance(pool, int | float) and pool > 0 else None,
        notes=notes,
    )


def identify(
    ev: RunEvidence, server_cmd: str | None, gpu: str | None, model: str | None
) -> Identified:
    """The configuration of one run (``server_cmd``: the flag, over the recorded one)."""
    if ev.run.target.simulated and server_cmd is None:
        return from_simulated(ev)
    cmd = server_cmd or ev.server_cmd
    if not cmd:
        raise ConfigError.over_fields(
            f"{ev.path}: no server command is recorded with this run, so the deployment "
            "cannot be identified",
            hint='give {server_cmd} "vllm serve MODEL …" (the command the server ran) and {gpu}',
            code="calibrate.unidentified",
        )
    return from_server_cmd(ev, cmd, gpu, model)


def identity(it: Identified) -> tuple[str, str, str, int]:
    """What must be equal across the runs of one calibration."""
    c = it.config
    return (c.engine, c.model, c.gpu, c.tensor_parallel_size)


def device_spec(it: Identified) -> DeviceSpec:
    """The device the runs ran on, as the profile records it (a CPU measured here)."""
    if is_cpu(it.config.gpu):
        return cpu_device(it.config.gpu)
    return device_of(it.config.resolve().gpu, it.threads)
