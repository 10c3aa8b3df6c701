"""What a plan is asked for: the model, the traffic, the SLOs, the candidates, the search's
settings (:class:`PlanRequest`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from servetune.checks import Invalid
from servetune.plan.fleet import FleetTraffic
from servetune.plan.space import Candidate
from servetune.plan.workload import Workload
from servetune.results.calibration_ref import CalibrationRef
from servetune.results.schema import BenchConfig, Slo

CONFIRM_ROWS = 12
"""Rows of the ranking confirmed by default: the table's (``servetune plan --top``)."""


class PlanRequest(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    model: str
    peak_rate: float = Field(gt=0, allow_inf_nan=False, examples=[12])
    """The traffic to hold, req/s."""
    average_rate: float | None = Field(None, gt=0, allow_inf_nan=False, examples=[5])
    """The day's mean, when it is below the peak (it prices the hours)."""
    slo: Slo
    candidates: list[Candidate]
    workload: Workload
    requests_per_point: int = Field(1000, ge=50, examples=[1000])
    """Requests per simulated point: P99 of fewer means little."""
    max_replicas: int = Field(64, ge=1, examples=[64])
    r: float = Field(4.0, gt=0, allow_inf_nan=False, examples=[4])
    workers: int | None = Field(None, ge=1)
    confirm_rows: int = Field(CONFIRM_ROWS, ge=1, examples=[12])
    """The first rows of the ranking confirmed on independent draws
    (:func:`~servetune.plan.confirmation.confirm_ranking`)."""
    sessions: BenchConfig | None = None
    """Multi-turn traffic (a ``multiturn`` BenchConfig, its rate in requests/s): planned as
    fleets behind the candidates' routers (:mod:`servetune.plan.fleet`)."""
    replicas: int | None = Field(None, ge=1, examples=[4])
    """Fleets of exactly this many replicas behind the router (default: the fewest)."""
    calibration: CalibrationRef | None = None
    """``--calibration``: the profile every candidate's engine configuration carries."""

    def fleet(self) -> FleetTraffic | None:
        """What the fleets behind a router are planned for (None: no candidate has one)."""
        if not any(c.router is not None for c in self.candidates):
            return None
        return FleetTraffic(
            sessions=self.sessions,
            peak_rate=self.peak_rate,
            max_replicas=self.max_replicas,
            replicas=self.replicas,
        )

    @model_validator(mode="after")
    def _consistent(self) -> PlanRequest:
        if self.average_rate is not None and self.average_rate > self.peak_rate:
            raise Invalid(
                f"{{average_rate}} {self.average_rate:g} must be at most {{peak_rate}} "
                f"{self.peak_rate:g}",
                hint="the average is the day's mean, the peak its busiest stretch",
            )
        routed = any(c.router is not None for c in self.candidates)
        if self.sessions is not None and not routed:
            raise Invalid(
                "multi-turn traffic is planned as fleets behind a router: the cache hits of a "
                "session's later turns depend on where the router sends them",
                hint="add a {router}: session (or score, prefix, round-robin; several, "
                "comma-separated, to compare them)",
            )
        if self.replicas is not None and not routed:
            raise Invalid(
                "{replicas} plans fleets of that many replicas behind a router",
                hint="add a {router}: score (or session, prefix, round-robin, least-loaded)",
            )
        if self.replicas is not None and self.replicas > self.max_replicas:
            raise Invalid(
                f"{{replicas}} {self.replicas} is more than {{max_replicas}} {self.max_replicas}",
                hint="raise {max_replicas} or lower {replicas}",
            )
        if self.slo.is_empty():
            raise Invalid(
                "a plan needs latency SLOs to hold",
                hint="e.g. {slo} ttft:500 tpot:50 e2el:10000 (ms)",
            )
        return self
