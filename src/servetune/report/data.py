"""What a report shows, read from a RUN_DIR or a SWEEP_DIR (files only, never a live client)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from servetune.errors import ResultError
from servetune.metrics.run_finish import open_run
from servetune.results.io import (
    REQUESTS_FILE,
    RUN_FILE,
    detect_dir,
    read_records,
    read_server_series,
)
from servetune.results.record import RequestRecord
from servetune.results.schema import RunResult
from servetune.results.server_series import ServerSample
from servetune.results.sweep_schema import (
    LevelRow,
    PlannedLevel,
    SweepResult,
)
from servetune.sweep.analysis import analyse
from servetune.sweep.curve import row_from_run
from servetune.sweep.reading import open_sweep


@dataclass
class Latencies:
    """Per-request figures of one level (ms, measured window only) for CDFs and timelines."""

    send_s: np.ndarray
    """Send time (s) of every request in the window."""
    send_lag: np.ndarray
    """Client send lag (ms) of every request in the window."""
    ok_send_s: np.ndarray
    """Send time (s) of each successful request; the three arrays below align with it."""
    ttft: np.ndarray
    tpot: np.ndarray
    """NaN where undefined (one output token)."""
    e2e: np.ndarray
    turn: np.ndarray | None = None
    """Each successful request's turn in its session (NaN outside one); None: no sessions."""
    cached_share: np.ndarray | None = None
    """Each successful request's cached prompt tokens / prompt tokens, as the answer said
    (NaN where it did not); None when no answer said."""


@dataclass
class LevelData:
    label: str
    row: LevelRow
    run: RunResult
    directory: Path
    series: list[ServerSample] = field(default_factory=list)
    latencies: Latencies | None = None


@dataclass
class ReportData:
    kind: Literal["run", "sweep"]
    path: Path
    levels: list[LevelData]
    sweep: SweepResult | None = None
    notes: list[str] = field(default_factory=list)
    """Things that could not be read (a level dir gone, a torn file), said once each."""

    @property
    def mode(self) -> str:
        return self.sweep.config.mode if self.sweep else self.levels[0].row.mode

    @property
    def first_run(self) -> RunResult:
        return self.levels[0].run


def _latencies(run_dir: Path, run: RunResult) -> Latencies | None:
    if not (run_dir / REQUESTS_FILE).exists():
        return None
    records = read_records(run_dir)
    lo, hi = run.summary.window_start_s * 1e9, run.summary.window_end_s * 1e9
    inside = [r for r in records if lo <= r.send_ns <= hi] or records
    ok = [r for r in inside if r.ok]

    def arr(values: list[float | None]) -> np.ndarray:
        return np.array([math.nan if v is None else v for v in values], dtype=float)

    return Latencies(
        send_s=np.array([r.send_ns / 1e9 for r in inside]),
        send_lag=np.array([r.send_lag_ms for r in inside]),
        ok_send_s=np.array([r.send_ns / 1e9 for r in ok]),
        ttft=arr([r.ttft_ms for r in ok]),
        tpot=arr([r.tpot_ms for r in ok]),
        e2e=arr([r.e2e_ms for r in ok]),
        turn=arr([r.turn for r in ok]) if any(r.turn is not None for r in ok) else None,
        cached_share=(
            arr([_cached_share(r) for r in ok])
            if any(r.cached_tokens is not None for r in ok)
            else None
        ),
    )


def _cached_share(r: RequestRecord) -> float | None:
    prompt = r.prompt_tokens if r.prompt_tokens is not None else r.planned_input_len
    if r.cached_tokens is None or prompt <= 0:
        return None
    return min(1.0, r.cached_tokens / prompt)


def _single_level(run: RunResult) -> PlannedLevel:
    cfg = run.config
    if math.isinf(cfg.request_rate) and cfg.max_concurrency is not None:
        return PlannedLevel(
            label=run.label or "run", mode="concurrency", value=float(cfg.max_concurrency)
        )
    return PlannedLevel(label=run.label or "run", mode="rate", value=cfg.request_rate)


def load_run(path: Path, with_requests: bool = True) -> ReportData:
    run = open_run(path)  # a run cut short: summarised from its records
    row = row_from_run(_single_level(run), path, path, run)
    level = LevelData(
        label=row.label,
        row=row,
        run=run,
        directory=path,
        series=read_server_series(path),
        latencies=_latencies(path, run) if with_requests else None,
    )
    return ReportData(kind="run", path=path, levels=[level])


def _reanalysed(sweep: SweepResult, notes: list[str]) -> SweepResult:
    """The knee and SLO-max recomputed from the rows by this servetune: the rows are the
    measurements, the conclusions are code. A changed answer is said, not hidden."""
    fresh = sweep.model_copy(deep=True)
    analyse(fresh)
    old_knee = sweep.knee.verdict if sweep.knee else None
    new_knee = fresh.knee.verdict if fresh.knee else None
    old_slo = sweep.slo_max.verdict if sweep.slo_max else None
    new_slo = fresh.slo_max.verdict if fresh.slo_max else None
    if (old_knee, old_slo) != (new_knee, new_slo) and sweep.rows:
        notes.append(
            "the knee and SLO-max were recomputed from the levels by this servetune; "
            f"sweep.json holds the earlier answer: {old_knee or '–'}"
        )
    return fresh


def load_sweep(path: Path, with_requests: bool = True) -> ReportData:
    notes: list[str] = []
    sweep = _reanalysed(open_sweep(path), notes)
    levels: list[LevelData] = []
    for row in sweep.measured_rows():
        d = path / row.level_dir
        if not (d / RUN_FILE).is_file():
            notes.append(f"{row.label}: {d} has no {RUN_FILE}; shown from sweep.json only")
            continue
        try:
            run = open_run(d)
            series = read_server_series(d)
            lat = _latencies(d, run) if with_requests else None
        except ResultError as exc:
            notes.append(f"{row.label}: {exc.message}")
            continue
        levels.append(LevelData(row.label, row, run, d, series, lat))
    if not sweep.rows:
        raise ResultError(
            f"{path / 'sweep.json'} has no finished level yet",
            hint="wait for the first level to end, or resume the sweep",
        )
    return ReportData(kind="sweep", path=path, levels=levels, sweep=sweep, notes=notes)


def load(path: str | Path, with_requests: bool = True) -> ReportData:
    """Read a RUN_DIR or a SWEEP_DIR (which one is told by the files it holds)."""
    p = Path(path).expanduser()
    if detect_dir(p) == "sweep":
        return load_sweep(p, with_requests)
    return load_run(p, with_requests)
