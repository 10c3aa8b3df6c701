"""``plan.json``: a capacity plan (what `servetune plan` found), for scripts and the report.

Rates in req/s, latencies in ms, prices in USD, ``*_usd_per_mtok`` per million tokens.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, computed_field

from servetune.results.calibration_ref import CalibrationRef
from servetune.results.jsonfile import read_model_file, write_model_file
from servetune.results.schema import Slo

PLAN_FILE = "plan.json"
PLAN_SCHEMA_VERSION = 1

CandidateStatus = Literal["ok", "cannot_start", "misses_slo", "too_many_replicas"]


class PlannedPoint(BaseModel):
    """One simulated operating point of one replica."""

    rate: float | None
    """Offered req/s; None: every request at once (saturation)."""
    requests: int | None = None
    """Requests simulated."""
    request_throughput: float
    input_tok_s: float
    output_tok_s: float
    ttft_p99_ms: float | None = None
    tpot_p50_ms: float | None = None
    tpot_p99_ms: float | None = None
    e2el_p99_ms: float | None = None
    kv_cache_usage_mean: float | None = None
    running_mean: float | None = None
    preemptions: int = 0
    prefix_cache_hit_rate: float | None = None
    """Prompt tokens the prefix cache(s) served ÷ those asked (a fleet: all its engines')."""


class PlannedCandidate(BaseModel):
    label: str
    gpu: str
    tensor_parallel_size: int
    data_parallel_size: int = 1
    enable_expert_parallel: bool = False
    engine: str = "vllm"
    quantization: str
    knob_set: str
    knobs: dict[str, Any] = Field(default_factory=dict)
    router: str | None = None
    """The routing policy in front of the replicas (None: planned one replica at a time).
    With a router the fleet itself was simulated: ``replicas`` is the fewest that held the
    peak, ``at_slo`` and ``draws`` are the fleet's points at the peak, and
    ``slo_max_rate_per_replica`` is the peak ÷ replicas (what each held behind it)."""
    search_replicas: int | None = None
    """A fleet's replica count on the search's draw, when its confirmation added replicas."""
    status: CandidateStatus
    reason: str | None = None
    """Why it cannot start (the memory planner's words) or misses the SLO."""
    vllm_serve: str | None = None
    """The engine's command line (``vllm serve …``, or ``python -m sglang.launch_server …``
    for an SGLang row); the name is kept from when vLLM was the only engine planned."""
    kv_cache_tokens: int | None = None
    engine_kv_tokens: int | None = None
    """The KV pool of the whole engine, tokens (every data-parallel rank's)."""
    max_concurrency_at_max_len: float | None = None
    replicas: int | None = None
    gpus_total: int | None = None
    usd_per_gpu_hour: float | None = None
    usd_per_hour: float | None = None
    slo_max_rate_per_replica: float | None = None
    """The highest rate at which the SLO held: on every one of ``confirm_draws`` independent
    draws of the traffic when confirmed, else on the search's one draw (optimistic by the
    draw-to-draw spread)."""
    confirm_draws: int = 0
    """Independent draws the SLO-max rate was checked on (0: not confirmed)."""
    search_slo_max_rate: float | None = None
    """The search's figure on its one draw, when the confirmation lowered or refuted it."""
    draws: list[PlannedPoint] = Field(default_factory=list)
    """The confirmation's draws at the SLO-max rate (or, refuted, at the last rate tried)."""
    limiting_metric: str | None = None
    headroom: float | None = None
    """(SLO-max rate × replicas) ÷ the rate planned for − 1 (None for a fleet behind a router:
    only the peak was simulated)."""
    concurrency_at_slo: float | None = None
    """Mean requests running per replica at the SLO-max rate."""
    input_usd_per_mtok: float | None = None
    output_usd_per_mtok: float | None = None
    blended_usd_per_mtok: float | None = None
    """At the planned traffic (the average rate when given, else the peak)."""
    slo_limit_output_usd_per_mtok: float | None = None
    """With every replica at its SLO-max rate: the best this configuration does at the SLO."""
    saturation: PlannedPoint | None = None
    saturation_output_usd_per_mtok: float | None = None
    """Saturated offline batch: every request at once, the lowest cost per token."""
    at_slo: PlannedPoint | None = None
    simulations: int = 0
    notes: list[str] = Field(default_factory=list)

    @property
    def gpus_per_replica(self) -> int:
        return self.tensor_parallel_size * self.data_parallel_size


class PlanResult(BaseModel):
    schema_version: int = PLAN_SCHEMA_VERSION
    kind: Literal["plan"] = "plan"
    created_at: str
    command: list[str] = Field(default_factory=list)
    model: str
    peak_rate: float
    """The rate the deployment must hold at its SLOs (req/s)."""
    average_rate: float
    """The rate costs are computed at."""
    slo: Slo
    workload: str
    mean_input_tokens: float
    mean_output_tokens: float
    requests_per_point: int
    pricing: str
    r: float
    formula: str
    routers: list[str] = Field(default_factory=list)
    """``--router``: the policies the fleets were planned behind (empty: one replica at a
    time)."""
    replicas: int | None = None
    """``--replicas``: the fleets' fixed size (None: the fewest that hold the peak)."""
    calibration: CalibrationRef | None = None
    """``--calibration``: the profile the candidates were simulated with (each candidate's
    notes say where its constants are transferred to another GPU or model)."""
    candidates: list[PlannedCandidate]
    winner: PlannedCandidate | None = None
    confirmed: PlannedPoint | None = None
    """The winner's worst draw at its SLO-max rate (of ``confirm_draws`` independent ones)."""
    confirmed_meets_slo: bool | None = None
    """True: the SLO held on every draw; None: the winner could not be confirmed."""
    confirm_draws: int = 0
    """Independent draws of the traffic each confirmation simulates."""
    elapsed_s: float = 0.0
    simulations: int = 0
    warnings: list[str] = Field(default_factory=list)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def settled_rows(self) -> int:
        """The leading candidates (status ``ok``, in ranking order) that are confirmed: their
        order and figures compare like with like. The ``ok`` candidates after them are not
        ranked against them on equal terms — most show the search's one-draw figure
        (optimistic) — but as a confirmation only lowers a figure, none of them could rank
        above the settled rows."""
        n = 0
        for c in self.candidates:
            if c.status != "ok" or not c.confirm_draws:
                break
            n += 1
        return n


def write_plan_result(path: str | Path, plan: PlanResult) -> Path:
    return write_model_file(Path(path), plan, hint="pass -o FILE elsewhere")


def read_plan_result(path: str | Path) -> PlanResult:
    return read_model_file(path, PlanResult, "plan", PLAN_SCHEMA_VERSION, PLAN_FILE)
