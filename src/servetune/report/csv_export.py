"""The per-level table as CSV (one row per level run; a single run is a one-row table)."""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from servetune.results.sweep_schema import LevelRow

COLUMNS: tuple[str, ...] = (
    "label",
    "role",
    "offered_rate",
    "concurrency",
    "status",
    "completed",
    "failed",
    "failure_share",
    "error_classes",
    "duration_s",
    "achieved_send_rate",
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    "request_goodput",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "tpot_p50_ms",
    "tpot_p99_ms",
    "e2el_p50_ms",
    "e2el_p99_ms",
    "e2el_mean_ms",
    "itl_p99_ms",
    "client_mean_concurrency",
    "send_lag_p99_ms",
    "client_behind",
    "kv_cache_usage_mean",
    "kv_cache_usage_max",
    "running_mean",
    "waiting_mean",
    "waiting_max",
    "preemptions_per_s",
    "gpu_utilization_mean",
    "level_dir",
)


def _cell(v: object) -> object:
    if v is None:
        return ""
    if isinstance(v, float):
        return "inf" if math.isinf(v) else f"{v:.6g}"
    return v


def row_values(row: LevelRow) -> dict[str, Any]:
    s = row.server
    values: dict[str, Any] = {
        "label": row.label,
        "role": row.role,
        "offered_rate": row.offered_rate,
        "concurrency": row.concurrency,
        "status": row.status,
        "completed": row.completed,
        "failed": row.failed,
        "failure_share": row.failure_share,
        "error_classes": " ".join(f"{c}:{n}" for c, n in row.error_classes.items()),
        "duration_s": row.duration_s,
        "achieved_send_rate": row.achieved_send_rate,
        "request_throughput": row.request_throughput,
        "output_throughput": row.output_throughput,
        "total_token_throughput": row.total_token_throughput,
        "request_goodput": row.request_goodput,
        "ttft_p50_ms": row.ttft_p50,
        "ttft_p99_ms": row.ttft_p99,
        "tpot_p50_ms": row.tpot_p50,
        "tpot_p99_ms": row.tpot_p99,
        "e2el_p50_ms": row.e2el_p50,
        "e2el_p99_ms": row.e2el_p99,
        "e2el_mean_ms": row.e2el_mean,
        "itl_p99_ms": row.itl_p99,
        "client_mean_concurrency": row.client_mean_concurrency,
        "send_lag_p99_ms": row.send_lag_p99,
        "client_behind": row.client_behind,
        "kv_cache_usage_mean": s.kv_cache_usage_mean if s else None,
        "kv_cache_usage_max": s.kv_cache_usage_max if s else None,
        "running_mean": s.running_mean if s else None,
        "waiting_mean": s.waiting_mean if s else None,
        "waiting_max": s.waiting_max if s else None,
        "preemptions_per_s": s.preemptions_per_s if s else None,
        "gpu_utilization_mean": s.gpu_utilization_mean if s else None,
        "level_dir": row.level_dir,
    }
    return values


def write_levels_csv(rows: Sequence[LevelRow], path: Path) -> Path:
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(COLUMNS))
        w.writeheader()
        for row in rows:
            w.writerow({k: _cell(v) for k, v in row_values(row).items()})
    return path
