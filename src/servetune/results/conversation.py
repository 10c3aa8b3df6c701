"""The schema of conversation and trace workloads: their settings in ``BenchConfig`` and what
the summary says of their sessions and of the prefix cache.

``MultiturnConfig``: synthetic sessions (``--dataset-name multiturn``) and the client's
behaviour in any session (think time, context cap, session header). ``TraceConfig``: replaying
a trace (``--dataset-name trace``). ``CacheFigures`` and ``SessionFigures`` go in the run's
``Summary`` (docs/metrics.md, "Sessions and the prefix cache").
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from servetune.checks import Invalid

TraceFormat = Literal["auto", "mooncake", "azure", "servetune"]
OverflowPolicy = Literal["truncate", "end"]
RateUnit = Literal["sessions", "requests"]
ThinkDist = Literal["exponential", "constant"]

MOONCAKE_BLOCK_TOKENS = 512
"""Tokens per ``hash_ids`` entry in Mooncake's traces (its paper and trace README)."""


class MultiturnConfig(BaseModel):
    """Sessions: how many turns, the shared system prompts, the client's think time and
    context cap. A user message's length is ``--random-input-len`` (± ``--random-range-ratio``),
    an answer's ``max_tokens`` is ``--random-output-len`` (the same ratio)."""

    model_config = ConfigDict(extra="forbid")

    turns_min: int = Field(4, ge=1, le=10_000)
    turns_max: int = Field(4, ge=1, le=10_000)
    """Turns per session: uniform integers in [turns_min, turns_max]."""
    system_prompt_len: int = Field(0, ge=0, le=1_000_000)
    """Tokens of the system prompt every session starts with (0: none)."""
    system_prompts: int = Field(1, ge=1, le=1_000_000)
    """Distinct system prompts; each session draws one (uniformly)."""
    think_time_s: float = Field(0.0, ge=0.0, le=86_400.0)
    """Mean time between an answer's end and the next turn's send."""
    think_dist: ThinkDist = "exponential"
    max_context: int | None = Field(None, ge=2)
    """The client's context cap in tokens (prompt + max_tokens); None: the server's
    max_model_len when the server tells it, else no cap."""
    on_overflow: OverflowPolicy = "truncate"
    """A turn past the cap: ``truncate`` drops the oldest exchanges (the system prompt stays),
    as chat clients do; ``end`` ends the session."""
    rate_unit: RateUnit = "sessions"
    """What ``--request-rate`` counts for session workloads: new sessions per second, or
    requests per second (sessions then arrive at rate / mean turns)."""
    session_header: str = Field("X-Session-ID", max_length=200)
    """The header carrying the session id ('' = none; the body's ``user`` field carries it
    always)."""

    @model_validator(mode="after")
    def _check(self) -> MultiturnConfig:
        if self.turns_max < self.turns_min:
            raise Invalid(
                f"{{turns_max}}: the most turns ({self.turns_max}) is below the least "
                f"({self.turns_min})",
                hint="give a range whose most is at least its least, e.g. 2 to 8 turns",
                code="workload.bad_turns",
            )
        h = self.session_header
        if h and (not h.isascii() or any(c in h for c in " :\r\n\t") or not h.isprintable()):
            raise Invalid(
                f"{{session_header}} {h!r} is not an HTTP header name",
                hint="e.g. {session_header}=X-Session-ID, or '' for none",
                code="workload.bad_header",
            )
        return self

    @property
    def mean_turns(self) -> float:
        return (self.turns_min + self.turns_max) / 2


class TraceConfig(BaseModel):
    """Replaying a trace: which format, and which part of its time, how fast."""

    model_config = ConfigDict(extra="forbid")

    format: TraceFormat = "auto"
    time_scale: float = Field(1.0, gt=0.0, le=1e6)
    """The trace's gaps are multiplied by this (0.5 replays twice as fast). With a finite
    ``--request-rate`` the gaps are instead scaled so the mean rate is that rate (a sweep's
    ladder replays the trace's shape at each level)."""
    window_start_s: float = Field(0.0, ge=0.0)
    window_end_s: float | None = Field(None, gt=0.0)
    """Only requests within [start, end) seconds of the trace's first one (trace time)."""

    @model_validator(mode="after")
    def _check(self) -> TraceConfig:
        if self.window_end_s is not None and self.window_end_s <= self.window_start_s:
            raise Invalid(
                f"the trace window {self.window_start_s:g}:{self.window_end_s:g} s is empty: "
                "its end ({window_end_s}) is not after its start",
                hint="a window ends after it starts, e.g. from 0 to 600 s of the trace",
                code="workload.bad_window",
            )
        return self


class CacheFigures(BaseModel):
    """What the prefix cache did for the measured requests, as the client saw it."""

    requests_reporting: int = 0
    """Successful requests whose answer said how many prompt tokens came from the cache
    (``usage.prompt_tokens_details.cached_tokens``)."""
    requests: int = 0
    """Successful requests in the window."""
    prompt_tokens: int = 0
    """Prompt tokens of the reporting requests (the server's ``usage.prompt_tokens``)."""
    cached_tokens: int = 0
    hit_rate: float | None = None
    """cached_tokens / prompt_tokens over the reporting requests (0–1)."""
    hit_rate_later_turns: float | None = None
    """The same over the turns after a session's first."""


class TurnFigures(BaseModel):
    """The requests at one turn index (1 = a session's first)."""

    turn: str
    """``1``, ``2``, …, or ``≥N`` for the last, pooled row."""
    requests: int
    ttft_p50: float | None = None
    ttft_p99: float | None = None
    tpot_p50: float | None = None
    tpot_p99: float | None = None
    mean_prompt_tokens: float | None = None
    hit_rate: float | None = None


class SessionFigures(BaseModel):
    """Sessions of the run: how many, how they ended, and latency by turn and by session."""

    sessions: int = 0
    """Sessions with at least one request in the window."""
    completed: int = 0
    """Sessions all of whose planned turns succeeded."""
    ended_early: int = 0
    """Sessions that stopped before their last turn: a turn failed, the context cap ended it,
    or the run ended (``--duration``, Ctrl-C)."""
    truncated_turns: int = 0
    """Turns sent after the client dropped older exchanges to fit the context cap."""
    mean_turns: float | None = None
    first_turn: TurnFigures | None = None
    later_turns: TurnFigures | None = None
    by_turn: list[TurnFigures] = Field(default_factory=list)
    session_ttft_mean_p50: float | None = None
    """Median over sessions of each session's mean TTFT (ms)."""
    session_ttft_mean_p99: float | None = None
    session_tpot_mean_p50: float | None = None
    session_tpot_mean_p99: float | None = None
