"""A finished offline run as the ``run.json`` a real bench would write: the RunResult (client
summary, failure verdict, client health, server summary over the measured window, the
simulated target with its memory plan and ``vllm serve`` line)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from servetune.arch.memory import MemoryPlan
from servetune.metrics.client_health import client_health
from servetune.metrics.run_result import run_result, run_summary
from servetune.metrics.server_summary import cache_config, summarize_server
from servetune.metrics.summary import ItlSource, assess_failures, empty_window, run_status
from servetune.profiles.sglang import SGLANG
from servetune.profiles.vllm import VLLM_V1
from servetune.results import server_series as ss
from servetune.results.record import RequestRecord
from servetune.results.schema import BenchConfig, Environment, RunResult, ServerInfo, TargetInfo
from servetune.results.server_series import ServerSample
from servetune.sim.config import EngineConfig
from servetune.sim.engine import Engine
from servetune.sim.exposition import cache_config_labels
from servetune.sim.resolved import ResolvedConfig, model_ref, sglang_command
from servetune.sim.scrape import NAMES_FOUND, SGLANG_NAMES_FOUND
from servetune.sim.semantics import SGLANG_SRT


def simulated_info(r: ResolvedConfig, mem: MemoryPlan) -> dict[str, Any]:
    info = r.summary()
    info["memory"] = mem.model_dump()
    info["vllm_serve_args"] = None
    return info


def launch_argv(r: ResolvedConfig) -> list[str]:
    """The simulated engine's command line: ``vllm serve …`` or SGLang's launch line."""
    if r.semantics == SGLANG_SRT:
        return sglang_command(r, r.model.name)
    return [
        "vllm",
        "serve",
        *EngineConfig(
            gpu=r.gpu.name,
            model=model_ref(r.model),
            calibration=r.calibration,
            tensor_parallel_size=r.tensor_parallel_size,
            max_num_seqs=r.max_num_seqs,
            max_num_batched_tokens=r.max_num_batched_tokens,
            gpu_memory_utilization=r.gpu_memory_utilization,
            max_model_len=r.max_model_len,
            enable_chunked_prefill=r.enable_chunked_prefill,
            enable_prefix_caching=r.enable_prefix_caching,
            quantization=r.quantization,  # type: ignore[arg-type]
            kv_cache_dtype=r.kv_cache_dtype,  # type: ignore[arg-type]
            block_size=r.block_size,
            long_prefill_token_threshold=r.long_prefill_token_threshold,
        ).vllm_args(),
    ]


def build_result(
    cfg: BenchConfig,
    r: ResolvedConfig,
    mem: MemoryPlan,
    records: Sequence[RequestRecord],
    series: Sequence[ServerSample],
    samples: int,
    eng: Engine,
    env: Environment,
    tokenizer: str,
    exact: bool,
    itl_ms: ItlSource | None = None,
) -> RunResult:
    summary = run_summary(records, cfg, itl_ms)
    failures = assess_failures(records, cfg.max_failure_rate)
    # The modelled client is perfect (sends on schedule), judged as a real one is.
    health = client_health(records, cfg.request_rate, cfg.max_concurrency, workers=1)
    info = simulated_info(r, mem)
    info["launch_args" if r.semantics == SGLANG_SRT else "vllm_serve_args"] = launch_argv(r)
    info["virtual_duration_s"] = eng.now
    info["engine_busy_share"] = eng.busy_s / eng.now if eng.now > 0 else 0.0
    info["steps"] = eng.counters.steps
    # What a real bench records: summarize_server over the client's measured window, plus
    # what the scraper adds (the cache config from /metrics, the engine map's version); the
    # simulator's own whole-run figures go under "sim", apart from the window's.
    server_summary: dict[str, Any] = (
        summarize_server(series, summary.window_start_s, summary.window_end_s) if series else {}
    )
    server_summary.update(cache_config([cache_config_labels(r, mem)]))
    server_summary["engine_version"] = (
        SGLANG.version if r.semantics == SGLANG_SRT else VLLM_V1.version
    )
    server_summary["sim"] = {
        "preemptions_total": eng.counters.preemptions,
        "num_gpu_blocks": mem.num_gpu_blocks,
        "kv_cache_tokens": mem.kv_cache_tokens,
        "max_concurrency": mem.max_concurrency,
        "prefix_cache_hit_rate": (eng.pool.hits / eng.pool.queries) if eng.pool.queries else None,
        "prefix_cache_evicted_blocks": eng.pool.evicted,
    }
    server = ServerInfo(
        engine="servetune-sim",
        metrics_url=None,
        names_found=dict(SGLANG_NAMES_FOUND if r.semantics == SGLANG_SRT else NAMES_FOUND),
        names_missing=[ss.GPU_UTILIZATION, ss.GPU_MEMORY_USED_BYTES, ss.GPU_MEMORY_TOTAL_BYTES],
        samples=samples,
        summary=server_summary,
    )
    warnings = [failures.verdict] if failures.failed else []
    nothing = empty_window(cfg, summary, failures)
    if nothing is not None:
        warnings.append(nothing)
    if not exact:
        warnings.append(
            "prompt lengths counted with the approximate tokenizer (the simulator counts the "
            "planned lengths as exact)"
        )
    return run_result(
        cfg,
        summary,
        environment=env,
        target=TargetInfo(
            base_url="sim://offline",
            model=r.served_model_name,
            served_models=[r.served_model_name],
            max_model_len=r.max_model_len,
            simulated=info,
            tokenizer=tokenizer,
            tokens_approximate=not exact,
        ),
        health=health,
        server=server,
        status=run_status(failures, measured_nothing=nothing is not None),
        failures=failures,
        warnings=warnings,
    )
