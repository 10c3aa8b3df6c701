"""The record sink loses nothing at close, even when a batch is still being written."""

from __future__ import annotations

import asyncio
import threading
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
    that write before it closes the file, then write the rest: every record lands, once, in
    order of batches.

    The first write is held (an Event, not a sleep) until close() has been called and has had
    every chance to run ahead, so the race is forced on every run, whatever the machine's load.
    """
    monkeypatch.setattr(sink_mod, "FLUSH_INTERVAL_S", 0.01)
    write, close = LineAppender.write, LineAppender.close
    events: list[str] = []
    first_write_started, release_first_write = threading.Event(), threading.Event()

    def held_write(self: LineAppender, data: bytes) -> None:
        n = data.count(b"\n")
        events.append(f"write {n} start")
        if not first_write_started.is_set():
            first_write_started.set()
            assert release_first_write.wait(30), "the test never released the first write"
        write(self, data)
        events.append(f"write {n} end")

    def logged_close(self: LineAppender) -> None:
        events.append("close")
        close(self)

    monkeypatch.setattr(LineAppender, "write", held_write)
    monkeypatch.setattr(LineAppender, "close", logged_close)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        s = RecordSink(tmp_path / "requests.jsonl")
        s.start()
        for i in range(5):
            s.add(_record(i))
        # the periodic flush takes these five and is now inside the disk write
        assert await loop.run_in_executor(None, first_write_started.wait, 30)
        for i in range(5, 8):
            s.add(_record(i))
        closing = asyncio.ensure_future(s.close())
        done, _ = await asyncio.wait({closing}, timeout=0.5)
        assert not done, "close() finished while a batch was still being written"
        assert "close" not in events
        release_first_write.set()
        await asyncio.wait_for(closing, 30)

    asyncio.run(main())
    assert events == ["write 5 start", "write 5 end", "write 3 start", "write 3 end", "close"]
    assert [r.id for r in read_records(tmp_path)] == list(range(8))
