"""The open-loop driver of one event loop: send each request at its planned time.

The clock is the plan's: a request scheduled at t goes at t whatever happened to the ones
before it (a slow server never delays later sends — no coordinated omission). With a
concurrency cap a request waits for a slot; the wait is recorded (``eligible_ns``) and
kept apart from the client's own lateness (``send_ns − eligible_ns``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from servetune.client.http import OpenAIClient
from servetune.loadgen.live import LiveStats
from servetune.loadgen.sink import RecordSink
from servetune.results.record import RequestRecord


class PlannedRequest:
    """A request as the driver needs it: id, offset, encoded body and planned lengths."""

    __slots__ = ("body", "input_len", "offset_ns", "output_len", "rid")

    def __init__(self, rid: int, offset_ns: int, body: bytes, input_len: int, output_len: int):
        self.rid = rid
        self.offset_ns = offset_ns
        self.body = body
        self.input_len = input_len
        self.output_len = output_len


class Driver:
    """Sends one loop's share of the plan and hands every record to the sink."""

    def __init__(
        self,
        client: OpenAIClient,
        items: Sequence[PlannedRequest],
        sink: RecordSink,
        t0_ns: int,
        max_concurrency: int | None = None,
        stop_after_ns: int | None = None,
    ) -> None:
        self.client = client
        self.items = items
        self.sink = sink
        self.t0_ns = t0_ns
        self.sem = asyncio.Semaphore(max_concurrency) if max_concurrency else None
        self.stop_after_ns = stop_after_ns
        self.stats = LiveStats()
        self.records_done = 0
        self._tasks: set[asyncio.Task[None]] = set()

    async def _one(self, p: PlannedRequest, scheduled: int, eligible: int) -> None:
        stats = self.stats
        try:
            rec: RequestRecord = await self.client.request(
                p.rid, self.client.prepare(p.body), p.input_len, p.output_len, scheduled, eligible
            )
        finally:
            if self.sem is not None:
                self.sem.release()
            stats.inflight -= 1
        self.sink.add(rec)
        stats.lags_ns.append(rec.send_ns - rec.eligible_ns)
        if rec.status == "ok":
            stats.done += 1
        elif rec.status == "failed":
            stats.failed += 1
        else:
            stats.cancelled += 1

    async def dispatch(self) -> None:
        """Send every planned request on time (returns when the last one is sent)."""
        clock = time.perf_counter_ns
        loop = asyncio.get_running_loop()
        t0, sem, stats = self.t0_ns, self.sem, self.stats
        deadline = None if self.stop_after_ns is None else t0 + self.stop_after_ns
        released = 0
        for p in self.items:
            due = t0 + p.offset_ns
            if deadline is not None and due >= deadline:
                break
            wait = due - clock()
            if wait > 0:
                # uvloop's timers resolve to 1 ms and fire on the nearest millisecond, so a
                # request may leave up to ~1 ms early; spinning the rest of the way costs a
                # loop iteration per few microseconds (a core, at high rates) for nothing a
                # Poisson plan could notice. Early sends show as negative send lag.
                await asyncio.sleep(wait / 1e9)
            if sem is not None:
                if sem.locked():
                    await sem.acquire()
                    # Later requests cannot have been eligible before the cap let this one go.
                    released = clock()
                    if deadline is not None and released >= deadline:
                        sem.release()
                        break
                else:
                    await sem.acquire()
            eligible = max(due, released)
            stats.sent += 1
            stats.inflight += 1
            task = loop.create_task(self._one(p, due, eligible))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def drain(self, timeout_s: float | None) -> None:
        """Wait for the requests in flight; cancel (and record) those still running after it."""
        if not self._tasks:
            return
        _, pending = await asyncio.wait(set(self._tasks), timeout=timeout_s)
        if pending:
            await self.cancel_all()

    async def cancel_all(self) -> None:
        """Cancel every request in flight; each leaves a cancelled record."""
        tasks = set(self._tasks)
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
