"""How long a scrape holds the event loop between its yields (wall time, and optionally this
thread's CPU time): the figure ``benchmarks/scrape_overhead.py`` reports."""

from __future__ import annotations

import asyncio
import time


class LoopClock:
    """Times the stretches a scrape holds the event loop between its yields: wall time (what
    a waiting send feels, preemption by the OS included) and, when asked, this thread's CPU
    time (the scrape's own cost). CPU time is opt-in: ``thread_time`` is a system call that
    costs tens of microseconds on some VMs."""

    def __init__(self, cpu: bool = False) -> None:
        self.cpu = cpu
        self.longest = 0.0
        self.longest_cpu = 0.0
        self.total_cpu = 0.0
        self._since = time.perf_counter()
        self._since_cpu = time.thread_time() if cpu else 0.0

    def _lap(self) -> None:
        held = time.perf_counter() - self._since
        if held > self.longest:
            self.longest = held
        if self.cpu:
            used = time.thread_time() - self._since_cpu
            self.longest_cpu = max(self.longest_cpu, used)
            self.total_cpu += used

    async def yield_(self) -> None:
        # Let the load generator's due sends run before the next slice of work.
        self._lap()
        await asyncio.sleep(0)
        self._since = time.perf_counter()
        if self.cpu:
            self._since_cpu = time.thread_time()

    def stop(self) -> None:
        self._lap()
