"""What ``diagnose`` hands out: findings with their evidence and actions (pydantic, so the
report, ``--json`` and the tuner read the same thing).

A :class:`Finding` is one rule's outcome on one run (or on a sweep's curve, or on a config
before launch). Its ``kind`` says how far the evidence goes:

- ``bottleneck`` — the rule's condition held over the measured window: a verdict;
- ``warning``    — something a person must know (a config that will not start, a run whose
  figures are not trustworthy, a risk ahead);
- ``advisory``   — not a fault: a reminder the seed asks for (quality check after quantizing);
- ``cannot_tell``— the rule could not be evaluated: a metric it needs is missing, and the
  finding says which one instead of guessing;
- ``healthy``    — no rule fired.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from servetune.knobs import KnobValue

FindingKind = Literal["bottleneck", "warning", "advisory", "cannot_tell", "healthy"]
Confidence = Literal["high", "medium", "low"]
Scope = Literal["run", "level", "curve", "config"]

KIND_ORDER: dict[str, int] = {
    "warning": 0,
    "bottleneck": 0,
    "healthy": 1,
    "advisory": 2,
    "cannot_tell": 3,
}

COST_STEPS: dict[int, str] = {
    0: "not a capacity step",
    1: "1 quantize",
    2: "2 push GPU/KV use to 80%+",
    3: "3 rate-limit at the knee",
    4: "4 only then add GPUs",
}
"""The seed's cost order: each capacity action carries its step; actions are listed in it."""


class Action(BaseModel):
    """One change to make: an engine knob (``knob`` set) or an operational step."""

    id: str
    title: str
    """One line for a person: "raise --max-num-seqs 16 → 32"."""
    knob: str | None = None
    """Engine-neutral knob name (servetune.engines.knobs), None for an operational step."""
    from_value: KnobValue | None = None
    to_value: KnobValue | None = None
    also: dict[str, KnobValue] = Field(default_factory=dict)
    """Knobs that must change with this one (engine-neutral name → value), e.g. chunked
    prefill on with a token budget of 2048: one change in vLLM's sense."""
    flags: dict[str, str] = Field(default_factory=dict)
    """engine → the exact flag change (vllm first; sglang, tgi, llama.cpp equivalents)."""
    expected: str
    """The effect to expect, with numbers where the evidence or the memory planner gives them."""
    risk: str
    cost_step: int = 0
    """The seed's cost order: 1 quantize, 2 push GPU/KV use to 80%+, 3 rate-limit at the knee,
    4 add GPUs; 0 = not a capacity step."""
    verify: str = ""
    """How to check it worked (the figure to re-measure)."""


class Finding(BaseModel):
    """One rule's outcome."""

    rule: str
    kind: FindingKind
    scope: Scope = "run"
    title: str
    """The verdict in one sentence."""
    seed: str = ""
    """The line of the seed this rule implements."""
    confidence: Confidence = "high"
    priority: int = 0
    evidence: list[str] = Field(default_factory=list)
    """The numbers and time windows that triggered it."""
    conditions: list[str] = Field(default_factory=list)
    """Each condition of the rule and how it came out ("✓", "✗", "?" missing)."""
    missing: list[str] = Field(default_factory=list)
    """Metrics the rule needed but the run lacks, said plainly."""
    needs: list[str] = Field(default_factory=list)
    """Every figure the rule reads."""
    actions: list[Action] = Field(default_factory=list)
    figures: dict[str, float] = Field(default_factory=dict)
    """The values of the figures the rule read."""
    level: str | None = None
    """The sweep level this finding is about, when it is about one."""
    cause: str | None = None
    """For a saturated server: what limits it, in words."""


class LevelDiagnosis(BaseModel):
    """The findings of one level of a sweep."""

    label: str
    load: float | None = None
    mode: str = "rate"
    past_knee: bool | None = None
    headline: str
    findings: list[Finding] = Field(default_factory=list)


class Diagnosis(BaseModel):
    """Everything ``diagnose`` concluded about a RUN_DIR, a SWEEP_DIR or a config."""

    kind: Literal["run", "sweep", "config"]
    path: str | None = None
    headline: str
    """One line for a person (the report's top sentence)."""
    healthy: bool = False
    findings: list[Finding] = Field(default_factory=list)
    """Ranked, most important first (for a sweep: the curve's findings)."""
    levels: list[LevelDiagnosis] = Field(default_factory=list)
    figures: dict[str, float] = Field(default_factory=dict)
    """Every figure computed for a single run (for machines)."""
    missing: dict[str, str] = Field(default_factory=dict)
    """figure → why it is missing."""
    knobs: dict[str, Any] = Field(default_factory=dict)
    """The engine knobs known for the run (from the simulated engine's record or --server-cmd)."""
    procedure: list[str] = Field(default_factory=list)
    """The seed's rules for changing anything (one knob at a time, old value, canary)."""
    notes: list[str] = Field(default_factory=list)

    def verdicts(self) -> list[Finding]:
        """Findings that are verdicts or warnings (not advisories, not cannot-tells)."""
        return [f for f in self.findings if f.kind in ("bottleneck", "warning")]

    def rules_fired(self) -> list[str]:
        return [f.rule for f in self.verdicts()]

    def finding(self, rule: str) -> Finding | None:
        return next((f for f in self.findings if f.rule == rule), None)
