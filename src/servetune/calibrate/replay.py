"""A measured run replayed on the simulator: the same requests (each one's prompt and output
tokens as the server counted them), arriving when the client really sent them (a late send
is the server's arrival, not the schedule's), under the run's own
concurrency cap and measurement window — so that what differs is the engine, not the workload.

The figures compared are the client's over the run's window (:data:`FIGURES`), computed by
the same summary code for the measured and the simulated run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from servetune.arch.memory import MemoryPlan
from servetune.metrics.run_result import run_summary
from servetune.results.calibration_file import FIGURES
from servetune.results.record import RequestRecord
from servetune.results.schema import BenchConfig, Summary
from servetune.sim.offline_run import OfflineRun
from servetune.sim.resolved import ResolvedConfig
from servetune.workload.plan import Plan
from servetune.workload.spec import RequestSpec


def figures(summary: Summary) -> dict[str, float | None]:
    """The compared figures of a summary."""

    def p99(metric: str) -> float | None:
        got = (summary.percentiles.get(metric) or {}).get("99")
        return float(got) if got is not None else None

    return {
        "output_throughput": summary.output_throughput or None,
        "mean_ttft_ms": summary.ttft.mean,
        "p99_ttft_ms": p99("ttft"),
        "mean_tpot_ms": summary.tpot.mean,
        "p99_tpot_ms": p99("tpot"),
    }


def by_prompt_length(records: Sequence[RequestRecord]) -> dict[str, float | None]:
    """Mean TTFT of the successful requests with the shortest and the longest third of the
    prompts (the records, not the summary: their difference is the prefill's cost per prompt
    token, which the mean alone confounds with the API server's fixed latency)."""
    ok = [
        (r.prompt_tokens or r.planned_input_len, (r.first_ns - r.send_ns) / 1e6)
        for r in records
        if r.status == "ok" and r.first_ns is not None
    ]
    if len(ok) < 9:
        return {"ttft_short_prompts_ms": None, "ttft_long_prompts_ms": None}
    ok.sort(key=lambda t: t[0])
    k = len(ok) // 3
    short, long_ = ok[:k], ok[-k:]
    return {
        "ttft_short_prompts_ms": sum(t for _, t in short) / k,
        "ttft_long_prompts_ms": sum(t for _, t in long_) / k,
    }


def replay_plan(records: Sequence[RequestRecord]) -> Plan:
    """The run's successful requests, at the times they were sent (run clock)."""
    ok = sorted((r for r in records if r.status == "ok"), key=lambda r: (r.send_ns, r.id))
    t0 = min((r.scheduled_ns for r in ok), default=0)
    specs = [
        RequestSpec(
            prompt="",
            input_len=max(1, r.prompt_tokens or r.planned_input_len),
            output_len=max(1, r.output_tokens or r.planned_output_len or 1),
        )
        for r in ok
    ]
    return Plan(requests=specs, offsets_ns=[max(0, r.send_ns - t0) for r in ok])


def replay_config(cfg: BenchConfig) -> BenchConfig:
    """The run's configuration as the replay runs it: the plan's requests as they are (no
    dataset to draw), every one of them (the window is the run's), output lengths exact."""
    return cfg.model_copy(
        update={"base_url": None, "ignore_eos": True, "num_prompts": max(1, cfg.num_prompts)}
    )


def replay(
    plan: Plan, cfg: BenchConfig, r: ResolvedConfig, mem: MemoryPlan
) -> dict[str, float | None]:
    """The figures of ``plan`` simulated on ``r``."""
    sim = OfflineRun(plan, cfg, r, mem, token_times=False)
    sim.run()
    return figures(run_summary(sim.records, cfg)) | by_prompt_length(sim.records)


def rel_error(sim: float | None, meas: float | None) -> float | None:
    """(sim − measured) / measured; None where either is missing."""
    if sim is None or meas is None or not math.isfinite(sim) or meas <= 0:
        return None
    return (sim - meas) / meas


__all__ = [
    "FIGURES",
    "by_prompt_length",
    "figures",
    "rel_error",
    "replay",
    "replay_config",
    "replay_plan",
]
