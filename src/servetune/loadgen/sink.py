"""Where finished records go: appended to requests.jsonl at least twice a second.

Lines are buffered in memory and written by a background thread in one ``write`` per batch,
so the event loop never blocks on the disk and a killed run keeps every record older than
the last flush.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from servetune.results.io import LineAppender, record_line
from servetune.results.record import RequestRecord

FLUSH_INTERVAL_S = 0.5


class RecordSink:
    """Buffers records and flushes them to ``requests.jsonl`` periodically."""

    def __init__(self, path: Path) -> None:
        self._file = LineAppender(path)
        self._lines: list[bytes] = []
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    def add(self, rec: RequestRecord) -> None:
        self._lines.append(record_line(rec))

    async def _flush(self) -> None:
        if not self._lines:
            return
        batch, self._lines = b"".join(self._lines), []
        await asyncio.get_running_loop().run_in_executor(None, self._file.write, batch)

    async def _loop(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), FLUSH_INTERVAL_S)
            await self._flush()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def close(self) -> None:
        """Flush everything and close the file.

        The periodic loop is asked to stop, not cancelled: a cancel landing while a batch is
        being written in the executor would let this close the file under that write, and
        the batch (the records of the last half second) would be lost.
        """
        if self._task is not None:
            self._stop.set()
            await asyncio.shield(self._task)
        await self._flush()
        self._file.close()
