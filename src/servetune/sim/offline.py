"""``sim run``: the simulated engine on a virtual clock over a whole workload.

The workload is the one ``bench`` would send (``make_plan``: same datasets, arrivals, seed);
the client is modelled as a perfect one (it sends on schedule; ``--max-concurrency`` holds
requests until a slot frees, first in first out). Writes the same files as a real bench:
``requests.jsonl`` (RequestRecord, ``tokens_source="sim"``, one chunk per token),
``server_metrics.jsonl`` (a scrape every 0.5 s of virtual time: KV use, running, waiting,
preemptions, token counters and cumulative TTFT/TPOT/ITL/E2E/queue/prefill/decode
histograms) and
``run.json`` (RunResult, with the engine configuration and memory plan in
``target.simulated``).

This module is the entry (the public ``simulate`` / ``run_offline``, the files, the collector
paused); the rest of the path has a module each, imported one way
(tests/sim/test_offline_layers.py): :mod:`~servetune.sim.construct` (records and samples
without validation) < :mod:`~servetune.sim.scrape` (a scrape of the engine) and
:mod:`~servetune.sim.offline_plan` (the workload) < :mod:`~servetune.sim.offline_result`
(the RunResult) and :mod:`~servetune.sim.offline_run` (the virtual-clock loop) < this module.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from servetune.errors import ConfigError
from servetune.results.environment import this_machine
from servetune.results.io import (
    REQUESTS_FILE,
    SERVER_METRICS_FILE,
    LineAppender,
    ensure_result_dir,
    record_line,
    write_run_result,
)
from servetune.results.schema import BenchConfig, RunResult
from servetune.routing.config import RoutingConfig
from servetune.sim.calibration_use import use_warnings
from servetune.sim.config import EngineConfig
from servetune.sim.memory import plan_memory
from servetune.sim.offline_plan import workload_plan
from servetune.sim.offline_result import build_result
from servetune.sim.offline_run import OfflineRun
from servetune.sim.replicas import check_replicas, merged_engine_facts, run_replicas
from servetune.sim.resolved import ResolvedConfig
from servetune.workload.prefix_share import workload_facts


def simulate(
    bench_cfg: BenchConfig,
    engine_cfg: EngineConfig | ResolvedConfig,
    result_dir: Path | str | None = None,
    *,
    vllm_version: str | None = None,
    server_metrics: bool = True,
    progress: bool = False,
    command: list[str] | None = None,
    replicas: int = 1,
    routing: RoutingConfig | None = None,
) -> RunResult:
    """Simulate ``bench_cfg`` (the workload, rate, concurrency cap) against ``engine_cfg`` on
    a virtual clock and return the run's :class:`RunResult` — the ``run.json`` a real
    ``servetune bench`` of that server would write: ``result.summary`` (throughput, TTFT,
    TPOT, ITL, E2E with percentiles and p99 intervals, goodput under ``bench_cfg.goodput``),
    ``result.server.summary`` (KV-cache use, running/waiting, preemptions, prefix-cache hits
    over the measured window) and ``result.target.simulated`` (the resolved configuration
    and its memory plan).

    This is the fast path for callers that simulate many configurations (the tuner, the
    planner): nothing is written unless ``result_dir`` is given (then ``requests.jsonl``,
    ``server_metrics.jsonl`` and ``run.json`` exactly as ``sim run`` writes them); the
    workload is drawn once per distinct ``bench_cfg`` (:func:`workload_plan`). About 1–2 ms
    of wall time per simulated second on one core.

    ``vllm_version``: the vLLM release whose memory planner sizes the KV pool (default: the
    0.11–0.16 rules, :mod:`servetune.sim.memory`). ``server_metrics=False`` skips the 0.5 s
    scrapes (and the server summary) when only the client-side figures are wanted.
    ``replicas`` > 1 (or a ``routing`` given): that many engines of ``engine_cfg`` behind
    ``routing``'s policy on one clock (:mod:`servetune.sim.replicas`); the result's
    ``target.simulated["routing"]`` has each replica's requests and prefix-cache hits.

    Raises :class:`~servetune.errors.SimError` where vLLM would refuse to start and
    :class:`~servetune.errors.ConfigError` for a workload that cannot be built."""
    if bench_cfg.base_url is not None:
        raise ConfigError.over_fields(
            "a simulated run simulates the engine itself: {base_url} does not apply",
            hint="load-test a real server with bench (servetune.bench, `servetune bench`)",
        )
    with collector_paused():
        if replicas > 1 or routing is not None:
            return _simulate_replicas(
                bench_cfg,
                engine_cfg,
                result_dir,
                vllm_version,
                command,
                replicas,
                routing or RoutingConfig(),
            )
        return _simulate(
            bench_cfg, engine_cfg, result_dir, vllm_version, server_metrics, progress, command
        )


def _simulate_replicas(
    bench_cfg: BenchConfig,
    engine_cfg: EngineConfig | ResolvedConfig,
    result_dir: Path | str | None,
    vllm_version: str | None,
    command: list[str] | None,
    replicas: int,
    routing: RoutingConfig,
) -> RunResult:
    r = engine_cfg.resolve() if isinstance(engine_cfg, EngineConfig) else engine_cfg
    mem = plan_memory(r, vllm_version)
    check_replicas(bench_cfg, replicas)
    plan, tok_name, tok_exact = workload_plan(bench_cfg)
    env = this_machine(command)
    done = run_replicas(plan, bench_cfg, r, mem, replicas, routing)
    runs = done.runs
    result = build_result(
        bench_cfg,
        r,
        mem,
        done.records,
        [],
        sum(run.samples for run in runs),
        runs[0].eng,
        env,
        tok_name,
        tok_exact,
    )
    if plan.sessions is not None or bench_cfg.dataset_name == "trace":
        result.workload = workload_facts(
            plan.requests, bench_cfg.seed, bench_cfg.endpoint == "chat", plan.sessions
        )
    info = result.target.simulated
    assert info is not None
    info.update(merged_engine_facts(runs))
    info["routing"] = {
        "replicas": replicas,
        "policy": routing.policy,
        "config": routing.model_dump(),
        "reasons": done.routed.reasons,
        "router_prefix_estimate": done.routed.prefix_estimate,
        "prefix_cache_hit_rate": done.hit_rate(),
        "per_replica": done.replica_summary(),
    }
    if result.server is not None:
        sim_facts = result.server.summary.setdefault("sim", {})
        sim_facts["preemptions_total"] = sum(run.eng.counters.preemptions for run in runs)
        sim_facts["prefix_cache_hit_rate"] = done.hit_rate()
        sim_facts["replicas"] = replicas
    if result_dir is None:
        return result
    out = ensure_result_dir(result_dir)
    (out / SERVER_METRICS_FILE).unlink(missing_ok=True)
    (out / REQUESTS_FILE).unlink(missing_ok=True)
    req_out = LineAppender(out / REQUESTS_FILE)
    try:
        req_out.write(b"".join(record_line(rec) for rec in done.records))
    finally:
        req_out.close()
    write_run_result(out, result)
    return result


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused for the duration (restored as it was).

    A run allocates a few hundred thousand container objects that all stay alive until it
    ends (records with their token times, scrapes, histogram snapshots); each collection that
    allocation triggers walks them again and frees nothing, which cost ~20% of a ``sim run``
    of the seed's sweep (gc callbacks: ~210 collections a sweep, ~125 ms). Reference counting
    still frees everything that is not a cycle; the cycles a run leaves (if any) are collected
    by the first collection after it."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _simulate(
    bench_cfg: BenchConfig,
    engine_cfg: EngineConfig | ResolvedConfig,
    result_dir: Path | str | None,
    vllm_version: str | None,
    server_metrics: bool,
    progress: bool,
    command: list[str] | None,
) -> RunResult:
    r = engine_cfg.resolve() if isinstance(engine_cfg, EngineConfig) else engine_cfg
    mem = plan_memory(r, vllm_version)
    plan, tok_name, tok_exact = workload_plan(bench_cfg)
    env = this_machine(command)
    out = None if result_dir is None else ensure_result_dir(result_dir)
    if out is None:
        sim = OfflineRun(plan, bench_cfg, r, mem, progress=progress, keep_series=server_metrics)
        sim.run()
    else:
        (out / REQUESTS_FILE).unlink(missing_ok=True)
        (out / SERVER_METRICS_FILE).unlink(missing_ok=True)
        req_out = LineAppender(out / REQUESTS_FILE)
        smp_out = LineAppender(out / SERVER_METRICS_FILE) if server_metrics else None
        try:
            sim = OfflineRun(plan, bench_cfg, r, mem, req_out, smp_out, progress)
            sim.run()
        finally:
            req_out.close()
            if smp_out is not None:
                smp_out.close()
    result = build_result(
        bench_cfg,
        r,
        mem,
        sim.records,
        sim.series,
        sim.samples,
        sim.eng,
        env,
        tok_name,
        tok_exact,
        sim.itl_ms,
    )
    if r.calibration is not None:
        specs = plan.requests
        n = max(1, len(specs))
        result.warnings.extend(
            use_warnings(
                r,
                sum(s.input_len for s in specs) / n,
                sum(s.output_len or 0 for s in specs) / n,
            )
        )
    if plan.sessions is not None or bench_cfg.dataset_name == "trace":
        # the reuse these workloads are about: what an unbounded cache could serve of them
        result.workload = workload_facts(
            plan.requests, bench_cfg.seed, bench_cfg.endpoint == "chat", plan.sessions
        )
    if out is None:
        return result
    write_run_result(out, result)
    return result


def run_offline(
    bench_cfg: BenchConfig,
    engine_cfg: EngineConfig,
    result_dir: Path | str,
    progress: bool = False,
    command: list[str] | None = None,
    replicas: int = 1,
    routing: RoutingConfig | None = None,
) -> RunResult:
    """``sim run``: :func:`simulate` into ``result_dir``."""
    return simulate(
        bench_cfg,
        engine_cfg,
        result_dir,
        progress=progress,
        command=command,
        replicas=replicas,
        routing=routing,
    )
