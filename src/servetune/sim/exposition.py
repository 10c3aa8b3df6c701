"""The simulated server's ``/metrics``: Prometheus text with vLLM's names.

Both generations of names are exposed, so any scraper finds what it looks for: vLLM 0.8–0.9
(``vllm:gpu_cache_usage_perc``, ``vllm:time_per_output_token_seconds`` = per-token gaps) and
V1 (``vllm:kv_cache_usage_perc``, ``vllm:request_time_per_output_token_seconds`` = per request,
``vllm:inter_token_latency_seconds``), plus the names both share.
"""

from __future__ import annotations

from servetune.arch.memory import MemoryPlan
from servetune.sim.engine import Engine
from servetune.sim.hist import Hist
from servetune.sim.resolved import ResolvedConfig


def cache_config_labels(r: ResolvedConfig, mem: MemoryPlan) -> dict[str, str]:
    """The labels of ``vllm:cache_config_info`` (vLLM's CacheConfig fields, as strings)."""
    return {
        "block_size": str(r.block_size),
        "cache_dtype": r.kv_cache_dtype,
        "enable_prefix_caching": str(r.enable_prefix_caching),
        "engine": "0",
        "gpu_memory_utilization": str(r.gpu_memory_utilization),
        "num_gpu_blocks": str(mem.num_gpu_blocks),
    }


def _fmt(v: float) -> str:
    if v == float("inf"):
        return "+Inf"
    return repr(float(v)) if isinstance(v, float) else str(v)


def hist_lines(out: list[str], name: str, help_: str, h: Hist, labels: str) -> None:
    out.append(f"# HELP {name} {help_}")
    out.append(f"# TYPE {name} histogram")
    for le, c in h.cumulative():
        out.append(f'{name}_bucket{{{labels},le="{_fmt(le)}"}} {float(c)}')
    out.append(f"{name}_count{{{labels}}} {float(h.count)}")
    out.append(f"{name}_sum{{{labels}}} {h.sum!r}")


def own_lines(out: list[str], eng: Engine, emission_lag: Hist, lab: str) -> None:
    """The simulator's own series, whatever engine it emulates: its emission lag and the
    simulated GPU busy time."""
    hist_lines(
        out,
        "servetune_sim:emission_lag_seconds",
        "Token write time minus the simulated step end (the simulator's own lateness).",
        emission_lag,
        lab,
    )
    out.append("# HELP servetune_sim:engine_busy_seconds Simulated GPU busy time.")
    out.append("# TYPE servetune_sim:engine_busy_seconds counter")
    out.append(f"servetune_sim:engine_busy_seconds{{{lab}}} {eng.busy_s!r}")


def render(eng: Engine, r: ResolvedConfig, mem: MemoryPlan, emission_lag: Hist) -> bytes:
    """The page: the engine's gauges, counters and histograms, the cache config, and the
    simulator's own emission lag."""
    c = eng.counters
    pool = eng.pool
    lab = f'engine="0",model_name="{r.served_model_name}"'
    out: list[str] = []

    def gauge(name: str, help_: str, v: float) -> None:
        out.append(f"# HELP {name} {help_}")
        out.append(f"# TYPE {name} gauge")
        out.append(f"{name}{{{lab}}} {float(v)!r}")

    def counter(name: str, help_: str, v: float, extra: str = "") -> None:
        base = name[: -len("_total")] if name.endswith("_total") else name
        out.append(f"# HELP {base} {help_}")
        out.append(f"# TYPE {base} counter")
        out.append(f"{name}{{{lab}{extra}}} {float(v)!r}")

    gauge(
        "vllm:num_requests_running",
        "Number of requests in model execution batches.",
        eng.num_running,
    )
    gauge(
        "vllm:num_requests_waiting", "Number of requests waiting to be processed.", eng.num_waiting
    )
    gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", pool.usage)
    gauge(
        "vllm:gpu_cache_usage_perc",
        "GPU KV-cache usage. 1 means 100 percent usage (vLLM 0.8-0.9 name).",
        pool.usage,
    )
    counter(
        "vllm:num_preemptions_total",
        "Cumulative number of preemption from the engine.",
        c.preemptions,
    )
    counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", c.prompt_tokens)
    counter(
        "vllm:generation_tokens_total",
        "Number of generation tokens processed.",
        c.generation_tokens,
    )
    out.append("# HELP vllm:request_success Count of successfully processed requests.")
    out.append("# TYPE vllm:request_success counter")
    for reason in ("stop", "length", "abort"):
        out.append(
            f'vllm:request_success_total{{{lab},finished_reason="{reason}"}} '
            f"{float(c.finished.get(reason, 0))!r}"
        )
    counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in tokens.", pool.queries)
    counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in tokens.", pool.hits)
    hist_lines(
        out,
        "vllm:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        eng.h_ttft,
        lab,
    )
    hist_lines(
        out,
        "vllm:request_time_per_output_token_seconds",
        "Histogram of time_per_output_token_seconds per request.",
        eng.h_tpot,
        lab,
    )
    hist_lines(
        out,
        "vllm:time_per_output_token_seconds",
        "Histogram of time per output token in seconds (vLLM 0.8-0.9 name: per-token gaps).",
        eng.h_itl,
        lab,
    )
    hist_lines(
        out,
        "vllm:inter_token_latency_seconds",
        "Histogram of inter-token latency in seconds.",
        eng.h_itl,
        lab,
    )
    hist_lines(
        out,
        "vllm:e2e_request_latency_seconds",
        "Histogram of e2e request latency in seconds.",
        eng.h_e2e,
        lab,
    )
    hist_lines(
        out,
        "vllm:request_queue_time_seconds",
        "Histogram of time spent in WAITING phase for request.",
        eng.h_queue,
        lab,
    )
    hist_lines(
        out,
        "vllm:request_prefill_time_seconds",
        "Histogram of time spent in PREFILL phase for request.",
        eng.h_prefill,
        lab,
    )
    hist_lines(
        out,
        "vllm:request_decode_time_seconds",
        "Histogram of time spent in DECODE phase for request.",
        eng.h_decode,
        lab,
    )
    info = ",".join(f'{k}="{v}"' for k, v in cache_config_labels(r, mem).items())
    out.append("# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig")
    out.append("# TYPE vllm:cache_config_info gauge")
    out.append(f"vllm:cache_config_info{{{info}}} 1.0")
    own_lines(out, eng, emission_lag, lab)
    return ("\n".join(out) + "\n").encode()
