"""``run.json`` over a run's life: written when the load starts (status ``running``), kept
current while it runs, finished from the records at the end — and, for a run that was killed
before it could finish it, rebuilt from the records on disk by whoever opens the directory.

Every write is atomic (a temporary file renamed over the old one), so a kill at any moment
leaves either the previous or the next version, never half of one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from servetune.loadgen.health import client_health
from servetune.loadgen.live import Snapshot
from servetune.metrics.run_result import run_result, run_summary
from servetune.metrics.summary import assess_failures, empty_window, run_status
from servetune.results.io import read_records, read_run_result, write_run_result
from servetune.results.record import RequestRecord
from servetune.results.schema import RunResult, Summary

UPDATE_EVERY_S = 2.0
"""How often a running ``run.json`` is rewritten with the live counters."""
STALE_AFTER_S = 120.0
"""A ``running`` file not rewritten for this long, by a process that cannot be checked (another
machine) or whose id now belongs to another process, is taken as cut short."""


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class RunFile:
    """The ``run.json`` of a run under way."""

    def __init__(self, run_dir: Path, result: RunResult) -> None:
        self.run_dir = run_dir
        self.result = result.model_copy(
            update={"status": "running", "pid": os.getpid(), "updated_at": now_iso()}
        )
        self._last = 0.0
        self._writing = False

    def start(self) -> None:
        """Write the first version (status running): from now on the directory opens."""
        write_run_result(self.run_dir, self.result)
        self._last = time.monotonic()

    def progress(self, snaps: Sequence[Snapshot]) -> None:
        """Live counters from the workers; rewrites the file at most every few seconds, off
        the event loop (the measuring loop must not wait for a disk)."""
        now = time.monotonic()
        if self._writing or now - self._last < UPDATE_EVERY_S:
            return
        self._last = now
        self.result.summary = Summary(
            completed=sum(s.done for s in snaps),
            failed=sum(s.failed for s in snaps),
            cancelled=sum(s.cancelled for s in snaps),
        )
        self.result.updated_at = now_iso()
        snapshot = self.result.model_copy(deep=True)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            write_run_result(self.run_dir, snapshot)
            return
        self._writing = True
        fut = loop.run_in_executor(None, write_run_result, self.run_dir, snapshot)
        fut.add_done_callback(self._written)

    def _written(self, fut: asyncio.Future[Path]) -> None:
        self._writing = False
        with contextlib.suppress(Exception):
            fut.result()  # a failed progress write is retried at the next tick

    async def settle(self) -> None:
        """Wait for a progress write in flight (so it cannot land after the final one)."""
        while self._writing:
            await asyncio.sleep(0.01)


def finish(
    base: RunResult,
    records: Sequence[RequestRecord],
    *,
    interrupted: bool,
    workers: int,
) -> RunResult:
    """The run's figures and verdict from its records (the summary, the client's health, the
    failures and the status): the end of a run, or the rebuilding of a cut-short one. What the
    records do not tell (target, environment, workload, server) comes from ``base``."""
    cfg = base.config
    health = client_health(records, cfg.request_rate, cfg.max_concurrency, workers)
    failures = assess_failures(records, cfg.max_failure_rate)
    summary = run_summary(records, cfg)
    warnings: list[str] = []
    if base.target.tokens_approximate:
        warnings.append(
            "prompt lengths are approximate (no local tokenizer and no server /tokenize); "
            "pass --tokenizer DIR for exact lengths"
        )
    if failures.failed:
        warnings.append(failures.verdict)
    nothing = None if interrupted else empty_window(cfg, summary, failures)
    if nothing is not None:
        warnings.append(nothing)
    by_chunks = summary.tokens_source.get("chunks", 0)
    if by_chunks:
        warnings.append(
            f"{by_chunks} of {summary.completed} responses carried no usage: their output "
            "tokens are their content chunks, fewer than the tokens whenever a chunk carries "
            "several (output throughput too low, TPOT too high); pass --tokenizer DIR to "
            "count their text"
        )
    if summary.short_outputs and cfg.ignore_eos:
        warnings.append(
            f"{summary.short_outputs} of {summary.completed} outputs came back shorter than "
            f"asked although ignore_eos was sent ({summary.short_output_tokens} tokens short "
            "in all): the server ignores it, or stopped them for another reason "
            "(max_model_len, a stop string)"
        )
    out = run_result(
        cfg,
        summary,
        environment=base.environment,
        target=base.target,
        health=health,
        server=base.server,
        status=run_status(failures, interrupted, measured_nothing=nothing is not None),
        failures=failures,
        workload=base.workload,
        warnings=warnings,
    )
    out.updated_at = now_iso()
    return out


# --- opening a run that may have been cut short ------------------------------------------


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def newest_mtime(paths: Sequence[Path]) -> float | None:
    """The latest modification time among ``paths`` (files, or every file under a folder)."""
    best: float | None = None
    for p in paths:
        files = [f for f in p.rglob("*") if f.is_file()] if p.is_dir() else [p]
        for f in files:
            try:
                m = f.stat().st_mtime
            except OSError:
                continue
            best = m if best is None else max(best, m)
    return best


def process_gone(pid: int | None, hostname: str | None, paths: Sequence[Path]) -> bool:
    """Whether the process that was writing a ``running`` result (``pid`` on ``hostname``)
    is gone. On this machine the process is checked (and, against a reused id, the files
    must have moved within the last half hour); elsewhere the files must have moved within
    the last :data:`STALE_AFTER_S` (a run rewrites run.json every few seconds)."""
    newest = newest_mtime(paths)
    age = None if newest is None else time.time() - newest
    if pid is not None and hostname == socket.gethostname():
        if not _alive(pid):
            return True
        return age is not None and age > 1800.0
    return age is None or age > STALE_AFTER_S


def open_run(run_dir: str | Path) -> RunResult:
    """``run.json`` as it stands — or, while it still says ``running``, the run summarised
    from the records on disk: status ``cut_short`` when its process is gone (killed), else
    ``running`` (figures so far)."""
    d = Path(run_dir).expanduser()
    run = read_run_result(d)
    if run.status != "running":
        return run
    gone = process_gone(run.pid, run.environment.hostname, [d])
    records = read_records(d)
    workers = run.client_health.workers or 1
    out = finish(run, records, interrupted=False, workers=workers)
    out.server = run.server
    out.pid, out.updated_at = run.pid, run.updated_at
    when = run.updated_at or "?"
    if gone:
        out.status = "cut_short"
        out.warnings.insert(
            0,
            f"the run was cut short: run.json still said running (last written {when} by "
            f"process {run.pid}, which is gone); the {len(records)} requests recorded by then "
            "are summarised here",
        )
    else:
        out.status = "running"
        out.warnings.insert(
            0,
            f"the run is still going (process {run.pid}, run.json last written {when}): "
            f"figures over the {len(records)} requests recorded so far",
        )
    return out
