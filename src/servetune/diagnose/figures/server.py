"""The server's figures of one run: ``server_metrics.jsonl`` reduced by
:func:`servetune.metrics.server_summary.summarize_server` over the client's measured window.

Durations are shares of the window: the server is scraped at a fixed interval, so the share of
samples is the share of time; the stretches where a gauge stayed past a threshold are kept too
(``Figures.windows``), in seconds on the run clock. A figure the server does not export is
missing with the reason, never guessed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from servetune.diagnose.figures.table import FIGURES, Figures
from servetune.errors import ServetuneError
from servetune.metrics.server_summary import summarize_server
from servetune.metrics.timeline import (
    stretches,
)
from servetune.profiles import find
from servetune.results import server_series as ss
from servetune.results.schema import RunResult
from servetune.results.server_series import ServerSample

MIN_SAMPLES = 6
"""Fewer server samples than this in the window: no durations are judged."""
GPU_UTIL_MISSING = "GPU utilisation not measured (pass --dcgm-url or run on the GPU host)"


def _gauge(samples: Sequence[ServerSample], concept: str) -> tuple[np.ndarray, np.ndarray]:
    having = [s for s in samples if concept in s.values]
    return (
        np.array([s.t for s in having], dtype=float),
        np.array([s.values[concept] for s in having], dtype=float),
    )


def read_series_tolerant(run_dir: Path) -> tuple[list[ServerSample], str | None]:
    """The server series, or ([], why) when it cannot be read (diagnose never fails on it)."""
    from pydantic import ValidationError

    from servetune.results.io import SERVER_METRICS_FILE, read_server_series

    if not (run_dir / SERVER_METRICS_FILE).exists():
        return [], None
    try:
        return read_server_series(run_dir), None
    except (ServetuneError, ValidationError, ValueError) as exc:
        first = str(exc).splitlines()[0]
        return [], f"{SERVER_METRICS_FILE} could not be read ({first})"


def _server_missing_reason(run: RunResult, samples: Sequence[ServerSample], concept: str) -> str:
    if not samples:
        err = run.server.error if run.server is not None and run.server.error else None
        base = "server metrics were not scraped (no server_metrics.jsonl)"
        return f"{base}: {err}" if err else base
    return {
        ss.KV_CACHE_USAGE: "KV usage not exposed by this server",
        ss.RUNNING: "running requests not exposed by this server",
        ss.WAITING: "waiting requests not exposed by this server",
        ss.PREEMPTIONS_TOTAL: "preemptions not exposed by this server "
        "(vLLM counts them; SGLang, TGI and llama.cpp do not)",
        ss.GPU_UTILIZATION: GPU_UTIL_MISSING,
    }.get(concept, f"{concept} not exposed by this server")


def server_figures(
    fig: Figures, run: RunResult, samples: Sequence[ServerSample], unreadable: str | None
) -> None:
    s = run.summary
    start, end = s.window_start_s, s.window_end_s
    if unreadable:
        samples = []
    win = [x for x in samples if start <= x.t <= end] if samples else []

    def reason(concept: str) -> str:
        if unreadable:
            return unreadable
        return _server_missing_reason(run, samples, concept)

    fig.put("server_samples", len(win))
    server_names = [
        ("kv", ss.KV_CACHE_USAGE),
        ("running", ss.RUNNING),
        ("waiting", ss.WAITING),
        ("preemptions", ss.PREEMPTIONS_TOTAL),
    ]
    if not win:
        for prefix, concept in server_names:
            for name in FIGURES:
                if name.startswith(prefix):
                    fig.miss(name, reason(concept))
        fig.miss("gpu_utilization_mean", GPU_UTIL_MISSING)
        fig.miss("queue_p99_ms", reason("queue"))
        return
    summ = summarize_server(samples, start, end)
    few = len(win) < MIN_SAMPLES
    few_why = (
        f"only {len(win)} server samples in the measured window: too few to judge how long "
        "a condition lasted"
    )

    # KV cache
    if "kv_cache_usage_mean" in summ:
        fig.put("kv_mean", summ["kv_cache_usage_mean"])
        fig.put("kv_p95", summ["kv_cache_usage_p95"])
        fig.put("kv_max", summ["kv_cache_usage_max"])
        if few:
            fig.miss("kv_share_below_50", few_why)
            fig.miss("kv_share_above_90", few_why)
        else:
            fig.put("kv_share_below_50", summ["kv_share_below_50"])
            fig.put("kv_share_above_90", summ["kv_share_above_90"])
            ts, kv = _gauge(win, ss.KV_CACHE_USAGE)
            fig.windows["kv_above_90"] = stretches(ts, kv > 0.9)
            fig.windows["kv_below_50"] = stretches(ts, kv < 0.5)
    else:
        for name in ("kv_mean", "kv_p95", "kv_max", "kv_share_below_50", "kv_share_above_90"):
            fig.miss(name, reason(ss.KV_CACHE_USAGE))

    # running / waiting
    cap_knob = fig.config.number("max_num_seqs")
    if "running_mean" in summ:
        fig.put("running_mean", summ["running_mean"])
        fig.put("running_max", summ["running_max"])
        ts, run_v = _gauge(win, ss.RUNNING)
        cap = cap_knob or None
        if cap is not None:
            fig.texts["running_cap_source"] = f"--max-num-seqs {int(cap)}"
        else:
            cap, source = _default_cap(fig)
            fig.texts["running_cap_source"] = source
        fig.put(
            "running_cap",
            cap,
            f"the server's --max-num-seqs is unknown (the highest running count seen, "
            f"{int(summ['running_max'])}, is what this run reached, not the cap): pass "
            '--server-cmd "vllm serve MODEL …" with the command the server was started with',
        )
        if few:
            fig.miss("running_at_cap_share", few_why)
        elif cap is None:
            fig.miss("running_at_cap_share", fig.missing.get("running_cap", "cap unknown"))
        elif cap > 0:
            at_cap = run_v >= max(cap - 0.5, 0.95 * cap)
            fig.put("running_at_cap_share", float(at_cap.mean()))
            fig.windows["running_at_cap"] = stretches(ts, at_cap)
    else:
        for name in ("running_mean", "running_max", "running_at_cap_share", "running_cap"):
            fig.miss(name, reason(ss.RUNNING))
    if "waiting_mean" in summ:
        fig.put("waiting_mean", summ["waiting_mean"])
        fig.put("waiting_max", summ["waiting_max"])
        ts, wait = _gauge(win, ss.WAITING)
        if few:
            fig.miss("waiting_share", few_why)
        else:
            fig.put("waiting_share", float((wait > 0).mean()))
            fig.windows["waiting"] = stretches(ts, wait > 0)
        if fig.sending is not None:
            trend = summarize_server(samples, *fig.sending).get("waiting_slope_per_s")
            fig.put("waiting_slope_sending", trend)
    else:
        for name in ("waiting_mean", "waiting_max", "waiting_share", "waiting_slope_sending"):
            fig.miss(name, reason(ss.WAITING))

    # preemptions
    if "preemptions" in summ:
        fig.put("preemptions", summ["preemptions"])
        fig.put("preemptions_per_s", summ["preemptions_per_s"])
        if s.completed:
            fig.put("preemptions_per_request", summ["preemptions"] / s.completed)
    else:
        for name in ("preemptions", "preemptions_per_s", "preemptions_per_request"):
            fig.miss(name, reason(ss.PREEMPTIONS_TOTAL))

    if "gpu_utilization_mean" in summ:
        fig.put("gpu_utilization_mean", summ["gpu_utilization_mean"])
    else:
        fig.miss("gpu_utilization_mean", GPU_UTIL_MISSING)
    queue = summ.get("queue_ms")
    if isinstance(queue, dict) and "p99" in queue:
        fig.put("queue_p99_ms", queue["p99"])
    else:
        fig.miss("queue_p99_ms", "the engine's queue-time histogram is not exposed")
    for key in ("prompt_tokens_per_s", "generation_tokens_per_s"):
        if key in summ:
            fig.put(f"server_{key}", float(summ[key]))


def _models_memory(engine: str | None) -> bool:
    """The engine's defaults and memory plan are the ones the simulated engine models."""
    found = find(engine)
    return found is not None and found.memory_model


def _default_cap(fig: Figures) -> tuple[float | None, str]:
    """The running cap from the knob registry's default, when the engine and the GPU are
    known (``--max-num-seqs`` left at vLLM's default); else unknown."""
    cfg = fig.config
    if not _models_memory(cfg.engine) or not cfg.gpu or cfg.source == "unknown":
        return None, "--max-num-seqs unknown"
    from servetune.arch.gpus import find_gpu
    from servetune.knobs import DefaultContext, default

    try:
        gpu = find_gpu(cfg.gpu)
    except ServetuneError:
        return None, "--max-num-seqs unknown"
    value = default(
        cfg.engine, "max_num_seqs", DefaultContext(device_name=gpu.name, device_gib=gpu.usable_gib)
    )
    if not isinstance(value, int | float):
        return None, "--max-num-seqs unknown"
    return float(value), f"vLLM's default --max-num-seqs {int(value)} on {gpu.name}"
