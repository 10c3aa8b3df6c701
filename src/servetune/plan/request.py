"""What a plan is asked for: the model, the traffic, the SLOs, the candidates, the search's
settings (:class:`PlanRequest`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from servetune.plan.space import Candidate
from servetune.plan.workload import Workload
from servetune.results.schema import Slo

CONFIRM_ROWS = 12
"""Rows of the ranking confirmed by default: the table's (``servetune plan --top``)."""


class PlanRequest(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    model: str
    peak_rate: float
    average_rate: float | None = None
    slo: Slo
    candidates: list[Candidate]
    workload: Workload
    requests_per_point: int = 1000
    max_replicas: int = 64
    r: float = 4.0
    workers: int | None = None
    confirm_rows: int = CONFIRM_ROWS
    """The first rows of the ranking confirmed on independent draws
    (:func:`~servetune.plan.confirmation.confirm_ranking`)."""
