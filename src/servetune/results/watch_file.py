"""``watch.json``: a `servetune watch --record DIR` recording, beside its
``server_metrics.jsonl`` (the samples, one a line, as a run's); diagnose and the report read
the pair. Rewritten atomically at every refresh, so a killed watch leaves a readable file.

Times: ``t`` in seconds since the watch started (the samples' clock); ``at`` wall-clock ISO
8601 UTC.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from servetune.results.jsonfile import read_model_file, write_json_atomic

WATCH_FILE = "watch.json"
WATCH_SCHEMA_VERSION = 1


class FindingEvent(BaseModel):
    """A rule's finding starting or stopping over the sliding window."""

    t: float
    at: str
    event: Literal["start", "stop"]
    rule: str
    kind: str
    title: str
    since: float | None = None
    """When the rule's condition began to hold (a start) or last held (a stop), on ``t``'s
    clock; the event itself comes the hold time later (``WatchRecording.hold_s``)."""


class WatchRecording(BaseModel):
    schema_version: int = WATCH_SCHEMA_VERSION
    kind: Literal["watch"] = "watch"
    status: Literal["running", "stopped"] = "running"
    url: str
    metrics_url: str
    engine: str | None = None
    engine_version: str | None = None
    started_at: str
    updated_at: str
    interval_s: float
    window_s: float
    hold_s: float = 0.0
    """A finding started once its rule held this long and stopped once absent this long
    (`servetune watch --for`; 0 in recordings made before the hold existed)."""
    duration_s: float = 0.0
    samples: int = 0
    names_found: dict[str, str] = Field(default_factory=dict)
    names_missing: list[str] = Field(default_factory=list)
    server_summary: dict[str, Any] = Field(default_factory=dict)
    """What the scraper read once (the engine's cache configuration: KV pool size …)."""
    config: dict[str, Any] = Field(default_factory=dict)
    """The engine configuration given to watch (--server-cmd/--gpu/--model), for diagnose."""
    last_window: dict[str, Any] = Field(default_factory=dict)
    """The figures of the last sliding window (see :class:`WatchFigures` in watch.session)."""
    active: list[str] = Field(default_factory=list)
    events: list[FindingEvent] = Field(default_factory=list)
    error: str | None = None


def write_watch_recording(directory: str | Path, rec: WatchRecording) -> Path:
    return write_json_atomic(
        Path(directory) / WATCH_FILE,
        rec.model_dump(mode="json"),
        hint="pass --record to a folder you can write to",
    )


def read_watch_recording(directory: str | Path) -> WatchRecording:
    return read_model_file(directory, WatchRecording, "watch", WATCH_SCHEMA_VERSION, WATCH_FILE)
