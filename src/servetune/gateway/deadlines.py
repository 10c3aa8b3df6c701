"""First-byte deadlines of the requests the gateway has sent: one timer for all of them.

A request sent upstream must see the response head within ``timeouts.first_byte_s`` (else it
fails over, see :mod:`servetune.gateway.flight`). A timer per request costs an event-loop
timer made and cancelled on every request (a few µs each on uvloop, and the cancel sits on the
path of the answer); nearly all of them are cancelled long before they fire. Instead the
requests waiting for a head are kept in a dict, and one timer looks every ``tick_s`` — a
tenth of the deadline, at most 1 s — for those past it. A head that does not come is so
noticed between the deadline and the deadline plus ``tick_s``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Watched(Protocol):
    def head_timeout(self) -> None:
        """The deadline passed without a response head."""
        ...


class HeadDeadlines:
    """The requests waiting for a response head, each with its deadline."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._due: dict[Watched, float] = {}
        self._timer: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        return len(self._due)

    @property
    def tick_s(self) -> float:
        return min(1.0, self.timeout_s / 10)

    def add(self, w: Watched) -> None:
        self._due[w] = time.monotonic() + self.timeout_s
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.tick_s, self._tick)

    def discard(self, w: Watched) -> None:
        self._due.pop(w, None)

    def _tick(self) -> None:
        self._timer = None
        now = time.monotonic()
        late = [w for w, t in self._due.items() if t <= now]
        for w in late:
            if self._due.pop(w, None) is not None:
                w.head_timeout()
        if self._due and self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.tick_s, self._tick)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._due.clear()
