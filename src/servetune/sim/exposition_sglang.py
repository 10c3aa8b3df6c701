"""The simulated server's ``/metrics`` under SGLang's semantics: Prometheus text with SGLang's
names (``python/sglang/srt/metrics/collector.py``, 2025 releases: ``sglang:num_running_reqs``,
``sglang:num_queue_reqs``, ``sglang:token_usage``, ``sglang:cache_hit_rate``, the token and
request counters, the TTFT / inter-token / per-output-token / end-to-end / queue-time
histograms), labelled ``model_name``, so that a scrape reads it as it reads a real SGLang
server (:data:`servetune.profiles.sglang.SGLANG`). The simulator's own emission lag and busy
time follow under ``servetune_sim:``."""

from __future__ import annotations

from servetune.arch.memory import MemoryPlan
from servetune.sim.engine import Engine
from servetune.sim.exposition import hist_lines, own_lines
from servetune.sim.hist import Hist
from servetune.sim.resolved import ResolvedConfig


def render(eng: Engine, r: ResolvedConfig, mem: MemoryPlan, emission_lag: Hist) -> bytes:
    """The page (see the module docstring)."""
    c = eng.counters
    pool = eng.pool
    lab = f'model_name="{r.served_model_name}"'
    out: list[str] = []

    def gauge(name: str, help_: str, v: float) -> None:
        out.append(f"# HELP {name} {help_}")
        out.append(f"# TYPE {name} gauge")
        out.append(f"{name}{{{lab}}} {float(v)!r}")

    def counter(name: str, help_: str, v: float) -> None:
        base = name[: -len("_total")]
        out.append(f"# HELP {base} {help_}")
        out.append(f"# TYPE {base} counter")
        out.append(f"{name}{{{lab}}} {float(v)!r}")

    gauge("sglang:num_running_reqs", "The number of running requests.", eng.num_running)
    gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", eng.num_waiting)
    gauge("sglang:num_used_tokens", "The number of used tokens.", pool.used * eng.B)
    gauge("sglang:token_usage", "The token usage.", pool.usage)
    gauge(
        "sglang:cache_hit_rate",
        "The prefix cache hit rate.",
        pool.hits / pool.queries if pool.queries else 0.0,
    )
    gauge("sglang:max_total_num_tokens", "Maximum total number of tokens.", mem.kv_cache_tokens)
    counter("sglang:prompt_tokens_total", "Number of prefill tokens processed.", c.prompt_tokens)
    counter(
        "sglang:generation_tokens_total",
        "Number of generation tokens processed.",
        c.generation_tokens,
    )
    counter("sglang:cached_tokens_total", "Number of cached prompt tokens.", pool.hits)
    finished = sum(c.finished.values())
    counter("sglang:num_requests_total", "Number of requests processed.", finished)
    counter(
        "sglang:num_aborted_requests_total",
        "Number of requests aborted.",
        c.finished.get("abort", 0),
    )
    counter(
        "sglang:num_retracted_requests_total",
        "Number of retracted requests.",
        c.preemptions,
    )
    for name, help_, h in (
        (
            "sglang:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            eng.h_ttft,
        ),
        (
            "sglang:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            eng.h_itl,
        ),
        (
            "sglang:time_per_output_token_seconds",
            "Histogram of time per output token in seconds.",
            eng.h_tpot,
        ),
        (
            "sglang:e2e_request_latency_seconds",
            "Histogram of End-to-end request latency in seconds",
            eng.h_e2e,
        ),
        ("sglang:queue_time_seconds", "Histogram of queueing time in seconds.", eng.h_queue),
    ):
        hist_lines(out, name, help_, h, lab)
    own_lines(out, eng, emission_lag, lab)
    return ("\n".join(out) + "\n").encode()
