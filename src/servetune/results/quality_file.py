"""``quality.json``: what `servetune quality` found — the verdict the gateway's canary gate
reads (top-level ``verdict`` and ``reason``) and the report shows, with every figure behind it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from servetune.errors import ResultError
from servetune.results.jsonfile import read_json_file, write_json_atomic

QUALITY_FILE = "quality.json"
QUALITY_SCHEMA_VERSION = 1

Verdict = Literal["pass", "fail", "inconclusive"]


class EndpointInfo(BaseModel):
    url: str
    model: str | None = None
    logprobs: str | None = None
    """How prompt logprobs were read: echo, stepwise, or None (see ``why_no_logprobs``)."""
    why_no_logprobs: str | None = None


class SampleResult(BaseModel):
    name: str
    check: str
    baseline: bool
    baseline_again: bool
    candidate: bool
    outcome: Literal["ok", "regression", "improvement", "flaky", "fails_both"]
    baseline_output: str = ""
    candidate_output: str = ""


class GreedyPair(BaseModel):
    prompt: str
    baseline: str
    candidate: str
    exact: bool
    prefix_share: float
    token_f1: float


class QualityReport(BaseModel):
    schema_version: int = QUALITY_SCHEMA_VERSION
    kind: Literal["quality"] = "quality"
    verdict: Verdict
    reason: str
    created_at: str
    command: list[str] = Field(default_factory=list)
    baseline: EndpointInfo
    candidate: EndpointInfo
    texts: str
    """Where the texts came from."""
    thresholds: dict[str, Any] = Field(default_factory=dict)
    metrics: list[dict[str, Any]] = Field(default_factory=list)
    """Per metric (perplexity, kl, top1, greedy, samples): candidate, floor, excess, 95% CI,
    threshold, status (see quality.verdict)."""
    perplexity: dict[str, float | None] = Field(default_factory=dict)
    """baseline, baseline_again, candidate: perplexity over all texts."""
    greedy: list[GreedyPair] = Field(default_factory=list)
    samples: list[SampleResult] = Field(default_factory=list)
    not_run: dict[str, str] = Field(default_factory=dict)
    """Check → why it could not run."""
    notes: list[str] = Field(default_factory=list)
    elapsed_s: float = 0.0


def write_quality_report(path: str | Path, report: QualityReport) -> Path:
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ResultError(f"cannot create {p.parent}: {exc.strerror or exc}") from exc
    return write_json_atomic(p, report.model_dump(mode="json"), hint="pass --out elsewhere")


def read_quality_report(path: str | Path) -> QualityReport:
    p = Path(path)
    if p.is_dir():
        p = p / QUALITY_FILE
    data = read_json_file(p, "quality", QUALITY_SCHEMA_VERSION)
    try:
        return QualityReport.model_validate(data)
    except ValidationError as exc:
        raise ResultError(f"{p} does not match the quality schema: {exc}") from exc
