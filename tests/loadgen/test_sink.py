"""The record sink loses nothing at close, even when a batch is still being written."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from servetune.loadgen import sink as sink_mod
from servetune.loadgen.sink import RecordSink
from servetune.results.io import LineAppender, read_records
from servetune.results.record import RequestRecord


def _record(i: int) -> RequestRecord:
    return RequestRecord(
        id=i,
        status="ok",
        scheduled_ns=i,
        eligible_ns=i,
        send_ns=i,
        end_ns=i + 1,
        planned_input_len=8,
    )


def test_close_while_a_batch_is_being_written_keeps_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slow disk: the periodic flush is mid-write when the run ends. The close must wait for
    it, then write the rest: every record lands, once, in order of batches."""
    monkeypatch.setattr(sink_mod, "FLUSH_INTERVAL_S", 0.05)
    write = LineAppender.write
    calls: list[int] = []

    def slow_write(self: LineAppender, data: bytes) -> None:
        calls.append(len(data))
        if len(calls) == 1:
            time.sleep(0.3)  # the first batch's disk write is slow, the last one's is not
        write(self, data)

    monkeypatch.setattr(LineAppender, "write", slow_write)

    async def main() -> None:
        s = RecordSink(tmp_path / "requests.jsonl")
        s.start()
        for i in range(5):
            s.add(_record(i))
        await asyncio.sleep(0.1)  # the periodic flush has taken these and is writing them
        for i in range(5, 8):
            s.add(_record(i))
        await s.close()

    asyncio.run(main())
    assert [r.id for r in read_records(tmp_path)] == list(range(8))
