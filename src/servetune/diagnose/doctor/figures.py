"""What the config doctor's rules read: the workload's lengths (from a run, or given) and the
figures of an engine config against them — the knobs, the KV pool the memory planner gives,
the requests it holds, the step a whole prefill of the longest prompt takes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from servetune.arch.memory import MemoryPlan
from servetune.arch.precision import requantized
from servetune.diagnose.figures.table import Figures
from servetune.diagnose.knobs import from_engine_config
from servetune.errors import ConfigError, ServetuneError
from servetune.sim.config import EngineConfig
from servetune.sim.memory import plan_memory
from servetune.sim.resolved import ResolvedConfig

WORKLOAD_MISSING = (
    "the workload's lengths are unknown (pass --workload-input-len/--workload-output-len, "
    "or a run directory)"
)


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
    from servetune.metrics.run_finish import open_run
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
        raise ConfigError.over_fields(
            "give both {input_len} and {output_len}",
            hint="e.g. {input_len}=1024 {output_len}=128",
        )
    return Workload(
        input_len=float(input_len),
        output_len=float(output_len),
        input_max=float(input_len),
        request_max=float(input_len + output_len),
        source="--workload-input-len/--workload-output-len",
    )


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
    fig.put("quantized", requantized(r.model.checkpoint_quantization, r.quantization))
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
