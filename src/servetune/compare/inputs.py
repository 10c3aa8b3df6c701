"""What ``compare`` reads: runs and sweeps, loaded with their requests and server series."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from servetune.errors import ResultError
from servetune.results.io import (
    detect_dir,
    read_records,
    read_run_result,
    read_server_series,
)
from servetune.results.record import RequestRecord
from servetune.results.schema import RunResult
from servetune.results.server_series import ServerSample
from servetune.results.sweep_schema import LevelRow, SweepResult, read_sweep_result


@dataclass
class RunInput:
    """One run directory: its result, its requests and its server series."""

    path: Path
    result: RunResult
    records: list[RequestRecord]
    samples: list[ServerSample]
    name: str = ""

    @property
    def label(self) -> str:
        return self.name or self.path.name


@dataclass
class SweepInput:
    """One sweep directory and its levels' run directories (loaded on demand)."""

    path: Path
    result: SweepResult
    name: str = ""
    _runs: dict[str, RunInput] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return self.name or self.path.name

    def level_run(self, row: LevelRow) -> RunInput:
        if row.label not in self._runs:
            self._runs[row.label] = load_run(self.path / row.level_dir, f"{self.label}/{row.label}")
        return self._runs[row.label]


Input = RunInput | SweepInput


def load_run(path: str | Path, name: str = "") -> RunInput:
    p = Path(path).expanduser()
    result = read_run_result(p)
    records = read_records(p)
    if not records:
        raise ResultError(
            f"{p} holds no requests ({p / 'requests.jsonl'} is missing or empty)",
            hint="compare needs each request's timings: point at a run's result directory",
        )
    return RunInput(p, result, records, read_server_series(p), name)


def load(path: str | Path) -> Input:
    """A run or a sweep, whichever the directory holds."""
    p = Path(path).expanduser()
    if detect_dir(p) == "sweep":
        return SweepInput(p, read_sweep_result(p))
    return load_run(p)
