"""The config doctor: warnings before launch, from a vLLM command line, a GPU, and the
workload's lengths — no run needed.

The simulated engine's memory planner (:mod:`servetune.sim.memory`, vLLM V1 semantics) says
whether the engine will start and how big its KV pool is
(:mod:`servetune.diagnose.doctor.refusal` when it will not); the rules
(:mod:`servetune.diagnose.doctor.rules`, data like the run rules) compare that with the
workload, over the figures of :mod:`servetune.diagnose.doctor.figures`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from servetune.arch.memory import MemoryPlan
from servetune.diagnose.actions.table import PROCEDURE
from servetune.diagnose.conditions import fmt_num
from servetune.diagnose.doctor.figures import (
    Workload,
    config_figures,
    workload_from_lengths,
    workload_from_run,
)
from servetune.diagnose.doctor.refusal import refusal_finding
from servetune.diagnose.doctor.rules import DOCTOR_RULES
from servetune.diagnose.evaluate import evaluate_rule, rank
from servetune.diagnose.knobs import planner_fields
from servetune.diagnose.model import Diagnosis, Finding
from servetune.errors import ConfigError, SimError
from servetune.profiles import profile
from servetune.sim.config import EngineConfig
from servetune.sim.memory import plan_memory
from servetune.sim.resolved import ResolvedConfig


def _resolve_for_figures(cfg: EngineConfig) -> tuple[ResolvedConfig | None, SimError | None]:
    """The resolved config, or (a chunked-prefill variant for the figures, the refusal)."""
    try:
        return cfg.resolve(), None
    except SimError as exc:
        if cfg.enable_chunked_prefill is False:
            try:
                return cfg.model_copy(update={"enable_chunked_prefill": True}).resolve(), exc
            except SimError:
                pass
        return None, exc


def diagnose_engine_config(
    cfg: EngineConfig,
    workload: Workload | None = None,
    ignored: list[str] | None = None,
    unsupported: list[str] | None = None,
) -> Diagnosis:
    """The config doctor on an EngineConfig (explicit fields = what the command line set)."""
    wl = workload or Workload()
    r, refusal = _resolve_for_figures(cfg)
    real_r = r if refusal is None else None
    mem: MemoryPlan | None = None
    findings: list[Finding] = []
    notes: list[str] = []
    if r is not None and refusal is None:
        try:
            mem = plan_memory(r)
        except SimError as exc:
            refusal = exc
    if refusal is not None:
        findings.append(refusal_finding(cfg, real_r, refusal))
    if mem is not None:
        notes += [f"vLLM would print: {line}" for line in mem.log_lines()]
    if r is None:
        return _config_diagnosis(findings, notes, {}, {}, cfg, ignored, unsupported, wl)
    chunked = cfg.enable_chunked_prefill if cfg.enable_chunked_prefill is not None else True
    fig = config_figures(cfg, r, mem, wl, chunked)
    if wl.known:
        notes.append(f"workload from {wl.source}")
    for rule in DOCTOR_RULES:
        f = evaluate_rule(rule, fig)
        if f is not None:
            f.scope = "config"
            findings.append(f)
    return _config_diagnosis(
        findings,
        notes,
        dict(fig.values),
        dict(fig.missing),
        cfg,
        ignored,
        unsupported,
        wl,
        knobs=dict(fig.config.values),
    )


def _config_diagnosis(
    findings: list[Finding],
    notes: list[str],
    values: dict[str, float],
    missing: dict[str, str],
    cfg: EngineConfig,
    ignored: list[str] | None,
    unsupported: list[str] | None,
    wl: Workload,
    knobs: dict[str, Any] | None = None,
) -> Diagnosis:
    findings = rank(findings)
    verdicts = [f for f in findings if f.kind in ("warning", "bottleneck")]
    if not verdicts:
        title = f"Starts on {cfg.gpu}"
        pool = values.get("kv_pool_tokens")
        if pool:
            title += f" with a KV pool of {fmt_num(pool)} tokens"
        title += "; no problem ahead" + ("" if wl.known else " that the config alone shows")
        findings.insert(
            0,
            Finding(rule="healthy", kind="healthy", scope="config", title=title),
        )
    top = findings[0]
    headline = top.title + (f" → {top.actions[0].title}" if verdicts and top.actions else "")
    if ignored:
        notes.append("ignored (no effect on memory or scheduling here): " + ", ".join(ignored))
    notes += list(unsupported or [])
    return Diagnosis(
        kind="config",
        headline=headline,
        healthy=not verdicts,
        findings=findings,
        figures=values,
        missing=missing,
        knobs=knobs or {},
        procedure=list(PROCEDURE),
        notes=notes,
    )


def engine_config_from_command(
    command: str | list[str], gpu: str, model: str | None = None
) -> tuple[EngineConfig, list[str], list[str]]:
    """An EngineConfig from a vLLM command line (explicit fields = the flags given), what it
    ignored and what the memory planner cannot model."""
    from servetune.knobs import parse_command

    cmd = parse_command(command)
    if not profile(cmd.engine).memory_model:
        raise ConfigError(
            f"the config doctor models vLLM; this is {cmd.engine}'s command line ({cmd.entry})",
            hint='give the vLLM command line ("vllm serve MODEL --flag …")',
            code="knob.command",
        )
    fields, unsupported = planner_fields(cmd)
    if model:
        fields["model"] = model
    if "model" not in fields:
        raise ConfigError.over_fields(
            "the command line names no model",
            hint='give "vllm serve MODEL …" or {model}=MODEL',
        )
    fields["gpu"] = gpu
    try:
        cfg = EngineConfig(**fields)
    except ValueError as exc:
        raise ConfigError(f"cannot read the command line: {exc}") from exc
    return cfg, cmd.ignored, unsupported


def diagnose_config(
    command: str | list[str],
    gpu: str,
    model: str | None = None,
    input_len: int | None = None,
    output_len: int | None = None,
    run_dir: str | Path | None = None,
) -> Diagnosis:
    """``servetune diagnose --server-cmd "vllm serve …" --gpu GPU``: warnings before launch."""
    cfg, ignored, unsupported = engine_config_from_command(command, gpu, model)
    # Resolve the catalog names now: an unknown GPU or model is the user's error to fix.
    from servetune.arch.gpus import find_gpu
    from servetune.arch.models import find_model

    find_gpu(cfg.gpu)
    find_model(cfg.model)
    if run_dir is not None:
        wl = workload_from_run(run_dir)
    else:
        wl = workload_from_lengths(input_len, output_len)
    return diagnose_engine_config(cfg, wl, ignored, unsupported)


__all__ = ["Workload", "diagnose_config", "diagnose_engine_config"]
