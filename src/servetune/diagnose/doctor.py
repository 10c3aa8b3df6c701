"""The config doctor: warnings before launch, from a vLLM command line, a GPU, and the
workload's lengths — no run needed.

The simulated engine's memory planner (:mod:`servetune.sim.memory`, vLLM V1 semantics) says
whether the engine will start and how big its KV pool is; the rules below (data, like the
run rules) compare that with the workload:

- ``will_not_start``   the weights, one max-model-len sequence, or the budget do not fit
                       (vLLM's own refusal, with the fixes the planner accepts);
- ``pool_below_batch`` the KV pool holds fewer than max-num-seqs average requests:
                       preemption ahead once the batch fills;
- ``max_model_len_oversized``  max-model-len far beyond the workload's longest request;
- ``prompts_exceed_batch``     without chunked prefill, max-num-batched-tokens smaller than
                               the longest prompt;
- ``prefill_stall_ahead``      without chunked prefill, the longest prompt runs as one step
                               that stalls every running stream;
- ``workload_too_long``        requests longer than max-model-len are refused;
- ``seq_cap_below_pool``       the pool holds many times max-num-seqs: the cap binds first;
- ``quantized_quality``        quantized: check quality before rollout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servetune.diagnose.actions import PROCEDURE, build_action, engine_flags
from servetune.diagnose.conditions import Cond, fmt_num
from servetune.diagnose.evaluate import evaluate_rule, rank
from servetune.diagnose.figure_table import Figures
from servetune.diagnose.knobs import from_engine_config, planner_fields
from servetune.diagnose.model import Action, Diagnosis, Finding
from servetune.diagnose.rules import RULES_BY_ID, Rule
from servetune.errors import ConfigError, ServetuneError, SimError
from servetune.knobs import KnobValue
from servetune.metrics.timeline import STALL_MIN_MS
from servetune.sim.config import EngineConfig, ResolvedConfig
from servetune.sim.memory import MemoryPlan, plan_memory

WORKLOAD_MISSING = (
    "the workload's lengths are unknown (pass --workload-input-len/--workload-output-len, "
    "or a run directory)"
)
OVERSIZED = 4.0
POOL_GAIN = 0.02
STALL_MS = STALL_MIN_MS
CAP_BINDS = 4.0


@dataclass
class Workload:
    input_len: float | None = None
    output_len: float | None = None
    input_max: float | None = None
    request_max: float | None = None
    source: str = ""

    @property
    def known(self) -> bool:
        return self.input_len is not None and self.output_len is not None


def workload_from_run(run_dir: str | Path) -> Workload:
    """The lengths a run actually used (mean prompt/output, longest prompt and request)."""
    from servetune.loadgen.runfile import open_run
    from servetune.results.io import read_records

    d = Path(run_dir).expanduser()
    run = open_run(d)
    s = run.summary
    wl = Workload(
        input_len=s.input_tokens_per_request.mean,
        output_len=s.output_tokens_per_request.mean,
        input_max=s.input_tokens_per_request.max,
        source=f"the run in {d}",
    )
    try:
        recs = [r for r in read_records(d) if r.ok]
    except ServetuneError:
        recs = []
    if recs:
        wl.request_max = max(
            r.planned_input_len + (r.output_tokens or r.planned_output_len or 0) for r in recs
        )
    elif wl.input_max is not None and s.output_tokens_per_request.max is not None:
        wl.request_max = wl.input_max + s.output_tokens_per_request.max
    return wl


def workload_from_lengths(input_len: int | None, output_len: int | None) -> Workload:
    if input_len is None and output_len is None:
        return Workload()
    if input_len is None or output_len is None:
        raise ConfigError(
            "give both --workload-input-len and --workload-output-len",
            hint="e.g. --workload-input-len 1024 --workload-output-len 128",
        )
    return Workload(
        input_len=float(input_len),
        output_len=float(output_len),
        input_max=float(input_len),
        request_max=float(input_len + output_len),
        source="--workload-input-len/--workload-output-len",
    )


# --- the rules ------------------------------------------------------------------------------

# Shared by the two --max-model-len rules (oversized: the pool would grow; loose: it would not).
_MML_OVER_WORKLOAD = Cond(
    "mml_over_workload",
    ">=",
    OVERSIZED,
    "--max-model-len / longest request {mml_over_workload:x} (rule: ≥ 4×)",
)
_MML_EVIDENCE = (
    "vLLM will print: maximum concurrency for {max_model_len:tok} tokens per request "
    "{max_concurrency_at_mml:x}"
)

DOCTOR_RULES: tuple[Rule, ...] = (
    Rule(
        id="pool_below_batch",
        kind="warning",
        priority=90,
        seed="KV pool full → preemption (predicted before launch)",
        verdict="Preemption ahead: the KV pool ({kv_pool_tokens:tok} tokens) holds only "
        "{pool_requests:num} requests of {tokens_per_request:tok} tokens, but --max-num-seqs "
        "lets {max_num_seqs:int} run at once",
        when=(
            Cond(
                "pool_per_seq",
                "<",
                1.0,
                "the pool holds {pool_per_seq:x} of --max-num-seqs average requests (rule: < 1×)",
            ),
        ),
        # Requests that do not fit max-model-len are refused, not preempted.
        unless=(Cond("mml_over_workload", "<", 1.0, ""),),
        evidence=(
            "KV pool {kv_pool_tokens:tok} tokens; a request of the workload's mean size "
            "(prompt {workload_input_len:tok} + output {workload_output_len:tok}) holds "
            "{tokens_per_request:tok} at its end",
            "--max-num-seqs {max_num_seqs:int} such requests need {kv_use_at_cap:pct} of the pool",
        ),
        actions=(
            "kv_cache_fp8",
            "quantize_weights",
            "raise_gpu_memory_utilization",
            "lower_max_num_seqs",
            "add_gpus",
        ),
    ),
    Rule(
        id="max_model_len_oversized",
        kind="warning",
        priority=70,
        seed="--max-model-len too big wastes the KV pool",
        verdict="--max-model-len {max_model_len:tok} is {mml_over_workload:x} the workload's "
        "longest request ({workload_request_max:tok} tokens) and wastes KV pool: lowering it "
        "gives the pool {mml_pool_gain:pct} more (without chunked prefill the step budget, and "
        "with it the activation peak, follows --max-model-len)",
        when=(
            _MML_OVER_WORKLOAD,
            Cond(
                "mml_pool_gain",
                ">",
                POOL_GAIN,
                "the pool grows {mml_pool_gain:pct} when it is lowered (rule: > 2%)",
            ),
        ),
        evidence=(_MML_EVIDENCE,),
        actions=("lower_max_model_len",),
    ),
    Rule(
        id="max_model_len_loose",
        kind="advisory",
        priority=40,
        seed="--max-model-len sets the KV pool's theoretical peak; too big wastes it",
        verdict="--max-model-len {max_model_len:tok} is {mml_over_workload:x} the workload's "
        "longest request ({workload_request_max:tok} tokens): in vLLM V1 that costs no KV "
        "memory by itself (the pool is what memory is left), but one request may hold up to "
        "{mml_pool_share:pct} of the pool — cap it near the longest request you serve",
        when=(_MML_OVER_WORKLOAD,),
        unless=(Cond("mml_pool_gain", ">", POOL_GAIN, ""),),
        evidence=(_MML_EVIDENCE,),
        actions=("lower_max_model_len",),
    ),
    Rule(
        id="prompts_exceed_batch",
        kind="warning",
        priority=95,
        seed="max-num-batched-tokens too small for the prompts without chunked prefill",
        verdict="--max-num-batched-tokens {max_num_batched_tokens:tok} is smaller than the "
        "longest prompt ({workload_input_max:tok} tokens) and chunked prefill is off: such a "
        "prompt never fits in one step",
        when=(
            Cond("enable_chunked_prefill", "==", 0, "chunked prefill off"),
            Cond(
                "mnbt_over_prompt",
                "<",
                1.0,
                "--max-num-batched-tokens / longest prompt {mnbt_over_prompt:x} (rule: < 1×)",
            ),
        ),
        actions=("enable_chunked_prefill",),
    ),
    Rule(
        id="prefill_stall_ahead",
        kind="warning",
        priority=60,
        seed="TTFT spikes → long prompts block: chunked prefill (predicted before launch)",
        verdict="Without chunked prefill, the longest prompt ({workload_input_max:tok} tokens) "
        "runs as one step of ≈ {prefill_stall_ms:ms} that stalls every running stream",
        when=(
            Cond("enable_chunked_prefill", "==", 0, "chunked prefill off"),
            Cond(
                "prefill_stall_ms",
                ">=",
                STALL_MS,
                "a whole prefill of the longest prompt ≈ {prefill_stall_ms:ms} (rule: ≥ 250 ms)",
            ),
        ),
        actions=("enable_chunked_prefill", "cap_input_length"),
    ),
    Rule(
        id="workload_too_long",
        kind="warning",
        priority=92,
        seed="--max-model-len too small truncates",
        verdict="Requests of up to {workload_request_max:tok} tokens exceed --max-model-len "
        "{max_model_len:tok}: vLLM refuses them (HTTP 400)",
        when=(
            Cond(
                "mml_over_workload",
                "<",
                1.0,
                "--max-model-len / longest request {mml_over_workload:x} (rule: < 1×)",
            ),
        ),
        actions=("raise_max_model_len",),
    ),
    Rule(
        id="seq_cap_below_pool",
        kind="advisory",
        priority=30,
        seed="cost order step 2: push GPU/KV use to 80%+ by tuning batch/concurrency",
        verdict="--max-num-seqs {max_num_seqs:int} binds long before memory: the pool holds "
        "{pool_requests:num} requests of this size ({pool_per_seq:x}), so KV use will stay "
        "under ≈ {kv_use_at_cap:pct}",
        when=(
            Cond(
                "pool_per_seq",
                ">=",
                CAP_BINDS,
                "the pool holds {pool_per_seq:x} of --max-num-seqs requests (rule: ≥ 4×)",
            ),
        ),
        actions=("raise_max_num_seqs",),
    ),
    RULES_BY_ID["quantized_quality"],
)


# --- figures of a config ---------------------------------------------------------------------


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


def prefill_step_ms(r: ResolvedConfig, tokens: int) -> float:
    """One step that prefills ``tokens`` of one prompt whole (the step-time model)."""
    from servetune.sim.perf import StepModel

    model = StepModel(r)
    return 1000.0 * model.step_time(tokens, 1, 1, 0.0, prefill_attn=tokens * tokens / 2)


def config_figures(
    cfg: EngineConfig,
    r: ResolvedConfig,
    mem: MemoryPlan | None,
    wl: Workload,
    chunked: bool,
) -> Figures:
    known = from_engine_config(cfg)
    known.values["enable_chunked_prefill"] = chunked
    fig = Figures(config=known)
    for knob in ("max_num_seqs", "max_num_batched_tokens", "max_model_len"):
        fig.put(knob, getattr(r, knob))
    fig.put("gpu_memory_utilization", r.gpu_memory_utilization)
    fig.put("tensor_parallel_size", r.tensor_parallel_size)
    fig.put("enable_chunked_prefill", chunked)
    fig.put("quantized", r.quantization is not None)
    fig.put("kv_fp8", r.kv_cache_dtype.startswith("fp8"))
    if mem is not None:
        fig.put("kv_pool_tokens", mem.kv_cache_tokens)
        fig.put("max_concurrency_at_mml", mem.max_concurrency)
    if not wl.known:
        for name in (
            "pool_per_seq",
            "mml_over_workload",
            "prefill_stall_ms",
            "mnbt_over_prompt",
            "pool_requests",
        ):
            fig.miss(name, WORKLOAD_MISSING)
        return fig
    assert wl.input_len is not None and wl.output_len is not None
    per_req = wl.input_len + wl.output_len
    fig.put("workload_input_len", wl.input_len)
    fig.put("workload_output_len", wl.output_len)
    fig.put("tokens_per_request", per_req)
    input_max = wl.input_max or wl.input_len
    request_max = wl.request_max or per_req
    fig.put("workload_input_max", input_max)
    fig.put("workload_request_max", request_max)
    fig.put("max_request_tokens", request_max)
    fig.put("input_len_max", input_max)
    if mem is not None:
        pool_reqs = mem.max_concurrency_for(math.ceil(per_req))
        fig.put("pool_requests", pool_reqs)
        fig.put("pool_per_seq", pool_reqs / r.max_num_seqs)
        fig.put("kv_use_at_cap", r.max_num_seqs / pool_reqs if pool_reqs else None)
    else:
        fig.miss("pool_per_seq", "the engine will not start, so it has no KV pool")
    fig.put("mml_over_workload", r.max_model_len / request_max)
    fig.put("mnbt_over_prompt", r.max_num_batched_tokens / input_max)
    if not chunked:
        fig.put("prefill_stall_ms", prefill_step_ms(r, int(input_max)))
    # What lowering max-model-len to the workload's need would give the pool.
    need = int(math.ceil(request_max * 1.25 / 1024) * 1024)
    if mem is not None and need < r.max_model_len:
        try:
            lowered = plan_memory(cfg.model_copy(update={"max_model_len": need}))
            fig.put(
                "mml_pool_gain",
                (lowered.kv_cache_tokens - mem.kv_cache_tokens) / mem.kv_cache_tokens,
            )
        except ServetuneError:
            pass
    if mem is not None:
        fig.put("mml_pool_share", min(1.0, r.max_model_len / mem.kv_cache_tokens))
    return fig


# --- the refusal ----------------------------------------------------------------------------


def _fix_candidates(
    cfg: EngineConfig, r: ResolvedConfig | None, err: SimError
) -> list[tuple[str, KnobValue, int]]:
    """(knob, value, cost step) changes worth trying for this refusal, chosen by its reason
    code (:mod:`servetune.errors`), never by the wording of its message."""
    code = err.code
    out: list[tuple[str, KnobValue, int]] = []
    util = cfg.gpu_memory_utilization
    mml = r.max_model_len if r is not None else cfg.max_model_len
    if code == "sim.batch_below_model_len":
        out.append(("enable_chunked_prefill", True, 0))
        if mml is not None:
            out.append(("max_num_batched_tokens", mml, 0))
        return out
    if code == "sim.model_len_above_model" and r is None:
        from servetune.sim.catalog import find_model

        out.append(("max_model_len", find_model(cfg.model).max_position_embeddings, 0))
        return out
    if code in ("sim.free_memory_short", "sim.graph_capture_oom"):
        for v in (0.92, 0.9, 0.85):
            if v < util:
                out.append(("gpu_memory_utilization", v, 0))
        return out
    if cfg.kv_cache_dtype == "auto":
        out.append(("kv_cache_dtype", "fp8", 1))
    if cfg.quantization is None:
        out += [("quantization", "fp8", 1), ("quantization", "awq", 1)]
    for v in (0.92, 0.95):
        if v > util:
            out.append(("gpu_memory_utilization", v, 2))
    if code == "sim.model_len_above_pool" and mml:
        # vLLM's "estimated maximum model length": what the pool holds (it does not depend
        # on max_model_len itself).
        try:
            pool = plan_memory(cfg.model_copy(update={"max_model_len": 1024})).kv_cache_tokens
        except ServetuneError:
            pool = 0
        for cand in (pool, mml // 2, mml // 4):
            if cand and cand < mml:
                out.append(("max_model_len", (int(cand) // 1024) * 1024 or int(cand), 2))
    if code == "sim.no_kv_memory" and r is not None:
        out.append(("max_num_batched_tokens", max(2048, r.max_num_batched_tokens // 2), 0))
    for tp in (2, 4, 8):
        if tp > cfg.tensor_parallel_size:
            out.append(("tensor_parallel_size", tp, 4))
    return out


def _refusal_finding(cfg: EngineConfig, r: ResolvedConfig | None, err: SimError) -> Finding:
    actions: list[Action] = []
    seen: set[str] = set()
    for knob, value, step in _fix_candidates(cfg, r, err):
        if knob in seen:
            continue
        changed = EngineConfig.model_validate({**cfg.model_dump(), knob: value})
        try:
            plan = plan_memory(changed)
        except ServetuneError:
            continue
        seen.add(knob)
        old = getattr(cfg, knob)
        flags = engine_flags(knob, old, value)
        actions.append(
            Action(
                id=f"start_{knob}",
                title=f"{flags['vllm'].split('  (was')[0]}",
                knob=knob,
                from_value=old,
                to_value=value,
                flags=flags,
                expected=f"the planner says it starts: KV pool {plan.kv_cache_tokens:,} tokens, "
                f"maximum concurrency {plan.max_concurrency:.2f}× at {plan.max_model_len:,} "
                "tokens per request",
                risk={
                    "quantization": "quality can drop: run a quality regression before rollout",
                    "kv_cache_dtype": "fp8 KV adds quantization error: check quality",
                    "gpu_memory_utilization": "less headroom for CUDA graphs and other "
                    "processes (OOM risk under load); canary first",
                    "max_model_len": "longer requests are refused (HTTP 400)",
                    "tensor_parallel_size": "more GPUs: the most expensive fix",
                    "enable_chunked_prefill": "a long prompt's own TTFT grows a little",
                    "max_num_batched_tokens": "a bigger activation peak: less KV pool",
                }.get(knob, ""),
                cost_step=step,
                verify="the engine starts (servetune engine start vllm …) and prints this pool",
            )
        )
    actions.sort(key=lambda a: a.cost_step or 2.5)
    return Finding(
        rule="will_not_start",
        kind="warning",
        scope="config",
        title=f"Will not start: {err.message}",
        seed="OOM → memory utilisation too high → lower --gpu-memory-utilization or "
        "--max-model-len",
        priority=200,
        evidence=[f"vLLM's hint: {err.hint}"] if err.hint else [],
        actions=actions,
    )


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
        findings.append(_refusal_finding(cfg, real_r, refusal))
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
    if cmd.engine not in ("vllm", "vllm-cpu", "sim"):
        raise ConfigError(
            f"the config doctor models vLLM; this is {cmd.engine}'s command line ({cmd.entry})",
            hint='give the vLLM command line ("vllm serve MODEL --flag …")',
            code="knob.command",
        )
    fields, unsupported = planner_fields(cmd)
    if model:
        fields["model"] = model
    if "model" not in fields:
        raise ConfigError(
            "the command line names no model",
            hint='give "vllm serve MODEL …" or --model MODEL',
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
    from servetune.sim.catalog import find_gpu, find_model

    find_gpu(cfg.gpu)
    find_model(cfg.model)
    if run_dir is not None:
        wl = workload_from_run(run_dir)
    else:
        wl = workload_from_lengths(input_len, output_len)
    return diagnose_engine_config(cfg, wl, ignored, unsupported)


__all__ = ["Workload", "build_action", "diagnose_config", "diagnose_engine_config"]
