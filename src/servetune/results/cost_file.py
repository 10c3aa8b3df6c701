"""``cost.json``: what `servetune cost` found for a run or a sweep (the report reads it).

Every price in USD; ``*_usd_per_mtok`` per million tokens; throughputs in tokens/s; shares
0–1. The formula and ``r`` (an input token costs 1/r of an output token) are in the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from servetune.results.calibration_ref import CalibrationRef
from servetune.results.jsonfile import read_model_file, write_json_atomic

COST_FILE = "cost.json"
COST_SCHEMA_VERSION = 1


class PriceUsed(BaseModel):
    """The price a cost was computed with, and where it came from."""

    gpu: str
    usd_per_gpu_hour: float
    pricing: str
    """on-demand / spot / reserved-1y / reserved-3y, or ``override``."""
    provider: str | None = None
    product: str | None = None
    source: str | None = None
    read_on: str | None = None
    via: str | None = None


class CostPoint(BaseModel):
    """The cost of one operating point (a level, the knee, saturation)."""

    label: str
    offered_rate: float | None = None
    request_throughput: float | None = None
    input_tok_s: float
    output_tok_s: float
    input_usd_per_mtok: float | None = None
    output_usd_per_mtok: float | None = None
    blended_usd_per_mtok: float | None = None
    goodput_output_usd_per_mtok: float | None = None
    """Output $/Mtok counting only requests that met every SLO (when the run had SLOs)."""
    usd_per_1k_requests: float | None = None
    kv_cache_usage_mean: float | None = None
    gpu_utilization_mean: float | None = None
    compute_use: float | None = None
    """Estimated compute load as a share of what the engine reaches (diagnose's
    ``compute_of_ceiling``), when the GPU and the model are known."""
    engine_busy_share: float | None = None
    """Simulated engine only: share of the time it was running a step."""
    running_mean: float | None = None
    ttft_p99_ms: float | None = None
    tpot_p99_ms: float | None = None
    vs_cheapest: float | None = None
    """This point's blended $/Mtok ÷ the cheapest measured point's (1 = the cheapest)."""


class CostRequest(BaseModel):
    """What ``cost`` is asked: the run or sweep to price and how it was served."""

    path: str
    gpu: str | None = None
    """The GPU type (a simulated run records it; a real run needs it)."""
    gpus: int | None = Field(None, ge=1, examples=[8])
    """GPUs serving it; None: the recorded tensor-parallel size, or 1."""
    r: float = Field(4.0, gt=0, allow_inf_nan=False, examples=[4])
    """Input tokens priced as 1/r of an output token (the formula's ratio)."""
    model: str | None = None


class CostReport(BaseModel):
    schema_version: int = COST_SCHEMA_VERSION
    kind: Literal["cost"] = "cost"
    source_kind: Literal["run", "sweep"]
    source_path: str
    gpu: str
    gpu_count: int
    gpu_count_source: str
    """Where the GPU type and count came from (the simulated engine's config, or flags)."""
    price: PriceUsed
    usd_per_hour: float
    r: float
    formula: str
    levels: list[CostPoint] = Field(default_factory=list)
    knee: CostPoint | None = None
    saturation: CostPoint | None = None
    cheapest: CostPoint | None = None
    knee_vs_cheapest: float | None = None
    """The knee's blended $/Mtok ÷ the cheapest point's: what holding latency costs."""
    advice: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    calibration: CalibrationRef | None = None
    """``--calibration``: the profile of the deployment (its GPUs where the result does not
    say them, its measured compute efficiency as the compute load's ceiling)."""
    compute_ceiling: float | None = None
    """The compute efficiency the compute load is a share of, when it is the profile's
    (None: the catalog's, diagnose's ``compute_ceiling``)."""


def write_cost_report(path: str | Path, report: CostReport) -> Path:
    return write_json_atomic(
        Path(path), report.model_dump(mode="json"), hint="pass -o FILE to write elsewhere"
    )


def read_cost_report(path: str | Path) -> CostReport:
    return read_model_file(path, CostReport, "cost", COST_SCHEMA_VERSION, COST_FILE)
