"""A run directory's ``run.json`` over the run's life, and whether its writer is still alive.

:class:`RunFile` writes ``run.json`` when the load starts (status ``running``) and keeps it
current while the load runs; the finished version (the figures from the records) is written by
whoever finishes the run (:func:`servetune.metrics.run_finish.finish`). A reader that finds a
``running`` file asks :func:`process_gone` whether the run is still going or was killed.

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
from typing import Protocol

from servetune.results.io import write_run_result
from servetune.results.schema import RunResult, Summary

UPDATE_EVERY_S = 2.0
"""How often a running ``run.json`` is rewritten with the live counters."""
STALE_AFTER_S = 120.0
"""A ``running`` file not rewritten for this long, by a process that cannot be checked (another
machine) or whose id now belongs to another process, is taken as cut short."""


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class Counts(Protocol):
    """The live counters of one load-generating worker, as far as ``run.json`` shows them."""

    @property
    def done(self) -> int: ...
    @property
    def failed(self) -> int: ...
    @property
    def cancelled(self) -> int: ...


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

    def progress(self, snaps: Sequence[Counts]) -> None:
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


# --- is the writer of a ``running`` file still alive? -------------------------------------


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
