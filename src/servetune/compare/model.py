"""What ``compare`` concludes, as written by ``--json`` (one schema for runs and sweeps)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from servetune.compare.comparable import Difference, FlagDifference

Verdict = Literal["better", "worse", "same", "not measured", "past capacity", "cannot tell"]
"""``cannot tell``: the runs are too short for their requests' lifetime (too few independent
blocks over their arrivals). ``past capacity``: both runs' queues grew throughout, so a
per-request latency (a wait in the queue, or the token pace of a batch that filled when the
queue's chance backlog said) measures the run's length and its realized arrivals; it is shown,
not tested."""


class FigureResult(BaseModel):
    """One figure of A and B: values, the difference B − A and its 95% interval."""

    label: str
    unit: str
    better: Literal["lower", "higher"]
    headline: bool = False
    a: float | None = None
    b: float | None = None
    delta: float | None = None
    rel: float | None = None
    """delta / a (None when a is 0 or missing)."""
    ci_low: float | None = None
    ci_high: float | None = None
    significant: bool = False
    p_value: float | None = None
    """Share of no-change replicates at least as far from 0 (this figure alone, unadjusted)."""
    verdict: Verdict = "not measured"


class Method(BaseModel):
    """How the intervals were made (enough to reproduce them)."""

    name: str = "studentized sign-flip test on aligned time blocks, bound over each family"
    windows: int = 0
    window_s: tuple[float, float] = (0.0, 0.0)
    block_windows: int = 1
    blocks: int = 0
    arrival_blocks: int = 0
    """Blocks over the stretch where requests arrived (the rest of a run only drains)."""
    replicates: int = 0
    level: float = 0.95
    family_critical: dict[str, float] = Field(default_factory=dict)
    """Critical value c of each family (half-width = c × the figure's standard error)."""
    rule: dict[str, str] = Field(default_factory=dict)
    """How each family's c was found: ``sign-flip max-T`` (≥ 10 blocks: the 95% quantile of
    the largest studentized replicate over the family) or ``Student-Bonferroni`` (fewer)."""
    decode_s: float = 0.0
    """The longer of the two runs' median decode (first to last token), seconds; blocks last
    at least twice that."""
    needed_requests: int = 0
    """The requests each run would need for 12 such blocks over its arrivals, at its rate."""
    too_short: bool = False
    """Fewer than 5 blocks over the arrivals: nothing is tested, the verdict is "cannot
    tell"."""


class PairComparison(BaseModel):
    a: str
    b: str
    comparable: bool = True
    forced: bool = False
    differences: list[Difference] = Field(default_factory=list)
    flags: list[FlagDifference] = Field(default_factory=list)
    flags_recorded: bool = False
    figures: dict[str, FigureResult] = Field(default_factory=dict)
    method: Method = Field(default_factory=Method)
    verdict: str = ""
    warnings: list[str] = Field(default_factory=list)
    slo: dict[str, float] = Field(default_factory=dict)


class Estimate(BaseModel):
    """A value with its 95% interval (None when it could not be estimated)."""

    value: float | None = None
    low: float | None = None
    high: float | None = None
    status: str = ""


class CurveRow(BaseModel):
    load: float | str
    a: dict[str, float | None] = Field(default_factory=dict)
    b: dict[str, float | None] = Field(default_factory=dict)
    significant: dict[str, bool] = Field(default_factory=dict)
    """Headline figures whose difference at this load is significant."""
    comparison: PairComparison | None = None


class SweepComparison(BaseModel):
    a: str
    b: str
    mode: str
    comparable: bool = True
    forced: bool = False
    differences: list[Difference] = Field(default_factory=list)
    flags: list[FlagDifference] = Field(default_factory=list)
    flags_recorded: bool = False
    rows: list[CurveRow] = Field(default_factory=list)
    knee_a: Estimate = Field(default_factory=Estimate)
    knee_b: Estimate = Field(default_factory=Estimate)
    knee_shift: Estimate = Field(default_factory=Estimate)
    slo_max_a: Estimate = Field(default_factory=Estimate)
    slo_max_b: Estimate = Field(default_factory=Estimate)
    slo_max_shift: Estimate = Field(default_factory=Estimate)
    slo: dict[str, float] = Field(default_factory=dict)
    verdict: str = ""
    warnings: list[str] = Field(default_factory=list)


class CompareReport(BaseModel):
    """``compare --json``: the first pair's figures at the top, every pair in ``pairs``."""

    kind: Literal["compare"] = "compare"
    inputs: list[str]
    figures: dict[str, FigureResult] = Field(default_factory=dict)
    pairs: list[PairComparison] = Field(default_factory=list)
    sweeps: list[SweepComparison] = Field(default_factory=list)
    verdict: str = ""
    extra: dict[str, Any] = Field(default_factory=dict)
