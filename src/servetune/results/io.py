"""Reading and writing run directories (``run.json``, ``requests.jsonl``,
``server_metrics.jsonl``), with clear errors for missing, foreign or newer files."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import ValidationError

from servetune.errors import ResultError
from servetune.results.jsonfile import read_model_file, schema_problem, write_json_atomic
from servetune.results.record import RequestRecord
from servetune.results.schema import SCHEMA_VERSION, RunResult
from servetune.results.server_series import ServerSample
from servetune.results.vllm_keys import vllm_keys

RUN_FILE = "run.json"
REQUESTS_FILE = "requests.jsonl"
SERVER_METRICS_FILE = "server_metrics.jsonl"
SWEEP_FILE = "sweep.json"


def ensure_result_dir(path: str | Path) -> Path:
    """Create ``path`` (and parents) and prove it is writable, or say why not."""
    p = Path(path).expanduser()
    try:
        p.mkdir(parents=True, exist_ok=True)
        probe = p / ".servetune-write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ResultError.over_fields(
            f"cannot write results to {p}: {exc.strerror or exc}",
            hint="give {result_dir} a folder you can write to",
        ) from exc
    return p


def free_run_dir(d: Path, overwrite: bool) -> None:
    """Refuse to write a run where one already is (unless ``overwrite``), or into a sweep's
    directory (its sweep.json would hide the run, and a later --resume would mix them)."""
    d = d.expanduser()
    if (d / SWEEP_FILE).exists():
        raise ResultError.over_fields(
            f"{d} holds a sweep ({SWEEP_FILE}): a run written there would be hidden by it",
            hint="give a new {result_dir} (a sweep's runs are its levels/<label>/ folders)",
        )
    existing = [n for n in (RUN_FILE, REQUESTS_FILE, SERVER_METRICS_FILE) if (d / n).exists()]
    if existing and not overwrite:
        raise ResultError.over_fields(
            f"{d} already holds a run ({', '.join(existing)})",
            hint="give a new {result_dir}, or {overwrite} to replace it",
        )


def record_line(rec: RequestRecord) -> bytes:
    """One JSONL line for a record (fast path: no validation, fields as stored)."""
    return orjson.dumps(rec.__dict__) + b"\n"


def sample_line(sample: ServerSample) -> bytes:
    """One JSONL line; the +Inf bucket is not stored (``count`` is its value, JSON has no
    infinity) and neither is a NaN."""
    hists = {
        k: {
            "buckets": [[le, c] for le, c in h.buckets if math.isfinite(le) and math.isfinite(c)],
            "sum": h.sum if math.isfinite(h.sum) else 0.0,
            "count": h.count,
        }
        for k, h in sample.histograms.items()
    }
    values = {k: v for k, v in sample.values.items() if math.isfinite(v)}
    return orjson.dumps({"t": sample.t, "values": values, "histograms": hists}) + b"\n"


class LineAppender:
    """Appends whole lines to a file with O_APPEND, one ``write`` per batch.

    Several processes may append to the same file: each batch of complete lines goes out in
    one system call, so lines from different writers never interleave.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def append_lines(path: str | Path, lines: Iterable[bytes]) -> None:
    """Append these whole lines to ``path`` in one write (a whole file's worth at once)."""
    out = LineAppender(path)
    try:
        out.write(b"".join(lines))
    finally:
        out.close()


def write_run_result(run_dir: str | Path, result: RunResult) -> Path:
    """Write ``run.json``: the RunResult with vLLM's flat keys first."""
    path = Path(run_dir) / RUN_FILE
    body = vllm_keys(result)
    body.update(result.model_dump(mode="json"))
    return write_json_atomic(path, body)


def read_run_result(run_dir: str | Path) -> RunResult:
    return read_model_file(Path(run_dir) / RUN_FILE, RunResult, "run", SCHEMA_VERSION, RUN_FILE)


def iter_jsonl(path: Path) -> Iterable[tuple[int, Any]]:
    """(line number, object) for each parseable line; a torn last line is skipped."""
    if not path.exists():
        return
    try:
        lines = path.read_bytes().split(b"\n")
    except OSError as exc:  # a directory in its place, no permission, an I/O error
        raise ResultError(f"cannot read {path}: {exc.strerror or exc}") from exc
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            yield i, orjson.loads(line)
        except orjson.JSONDecodeError:
            if i == len(lines) or (i == len(lines) - 1 and not lines[-1]):
                continue  # a line cut by a kill mid-write: everything before it is whole
            raise ResultError(f"{path}:{i}: not valid JSON") from None


def read_records(run_dir: str | Path) -> list[RequestRecord]:
    path = Path(run_dir) / REQUESTS_FILE
    out = []
    for lineno, obj in iter_jsonl(path):
        try:
            out.append(RequestRecord.model_validate(obj))
        except ValidationError as exc:
            raise ResultError(
                f"{path}:{lineno}: not a request record: {schema_problem(exc)}"
            ) from exc
    return out


def read_server_series(run_dir: str | Path) -> list[ServerSample]:
    path = Path(run_dir) / SERVER_METRICS_FILE
    out = []
    for lineno, obj in iter_jsonl(path):
        try:
            out.append(ServerSample.model_validate(obj))
        except ValidationError as exc:
            raise ResultError(
                f"{path}:{lineno}: not a server metrics sample: {schema_problem(exc)}",
                hint=f"move {path.name} aside to read the run without the server's metrics",
            ) from exc
    return out


def detect_dir(path: str | Path) -> Literal["run", "sweep"]:
    """Tell a RUN_DIR from a SWEEP_DIR, or explain what was expected."""
    p = Path(path).expanduser()
    if (p / SWEEP_FILE).is_file():
        return "sweep"
    if (p / RUN_FILE).is_file():
        return "run"
    if not p.exists():
        raise ResultError(
            f"{p} does not exist", hint="point at the result directory of a bench, sweep or sim run"
        )
    raise ResultError(
        f"{p} holds no servetune result: expected {RUN_FILE} (a run) or {SWEEP_FILE} (a sweep)",
        hint="point at the result directory of a bench, sweep or sim run",
    )
