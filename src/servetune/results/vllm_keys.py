"""The ``vllm bench serve`` result keys, so existing scripts and dashboards read our files.

Names follow vLLM's ``--save-result`` JSON: ``duration``, ``completed``, ``request_throughput``,
``mean_ttft_ms``, ``median_ttft_ms``, ``std_ttft_ms``, ``p99_ttft_ms``, … for ttft, tpot, itl
and e2el. The percentiles asked with ``--percentile-metrics`` / ``--metric-percentiles`` are
added under vLLM's names (``p25_ttft_ms``, ``p99.9_itl_ms``); the fixed set stays (a superset of
what vLLM writes, so scripts written for its defaults find their keys).
"""

from __future__ import annotations

from typing import Any

from servetune.results.schema import RunResult, Stats, rate_to_json

_PCTS = (("p50", "p50"), ("p90", "p90"), ("p95", "p95"), ("p99", "p99"), ("p99.9", "p999"))


def _metric_keys(name: str, s: Stats) -> dict[str, Any]:
    out: dict[str, Any] = {
        f"mean_{name}_ms": s.mean,
        f"median_{name}_ms": s.p50,
        f"std_{name}_ms": s.std,
    }
    for label, attr in _PCTS:
        out[f"p{label[1:]}_{name}_ms"] = getattr(s, attr)
    return out


def vllm_keys(result: RunResult) -> dict[str, Any]:
    """The flat ``vllm bench serve`` keys of a run."""
    s = result.summary
    cfg = result.config
    keys: dict[str, Any] = {
        "date": result.environment.started_at,
        "backend": "openai-chat" if cfg.endpoint == "chat" else "openai",
        "model_id": result.target.model,
        "tokenizer_id": result.target.tokenizer,
        "num_prompts": s.completed + s.failed + s.cancelled + s.excluded,
        "request_rate": rate_to_json(cfg.request_rate),
        "burstiness": cfg.burstiness,
        "max_concurrency": cfg.max_concurrency,
        "duration": s.duration_s,
        "completed": s.completed,
        "failed": s.failed,
        "total_input_tokens": s.total_input_tokens,
        "total_output_tokens": s.total_output_tokens,
        "request_throughput": s.request_throughput,
        "request_goodput": s.request_goodput,
        "output_throughput": s.output_throughput,
        "total_token_throughput": s.total_token_throughput,
        "max_concurrent_requests": s.max_concurrent_requests,
    }
    for name, stats in (("ttft", s.ttft), ("tpot", s.tpot), ("itl", s.itl), ("e2el", s.e2el)):
        keys.update(_metric_keys(name, stats))
    for name, table in s.percentiles.items():
        for word, value in table.items():
            keys[f"p{word}_{name}_ms"] = value
    return keys
