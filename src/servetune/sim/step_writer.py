"""How the real-time server sends a step's tokens: from the loop thread through each
connection's transport (``serial``), or split with :mod:`servetune.sim.fanout`'s second
thread straight to the sockets (``threads``; ``realtime``, the default, the same at
real-time priority where permitted). Chosen by ``SERVETUNE_SIM_WRITER``; where Linux AIO is
missing, serial is the only way.
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import sys
import time
from array import array
from typing import TYPE_CHECKING

from servetune.sim.fanout import Fanout

if TYPE_CHECKING:
    from servetune.sim.server import Write

WRITER_ENV = "SERVETUNE_SIM_WRITER"

_SWITCH_S = 0.0005
"""The GIL's switch interval while the fanout's helper thread exists (default 5 ms)."""


class StepWriter:
    """Arms a step's writes while its simulated time runs, sends them at its end."""

    def __init__(self, mode: str | None = None) -> None:
        mode = mode or os.environ.get(WRITER_ENV, "realtime")
        self.fanout = Fanout.create(realtime=mode != "threads") if mode != "serial" else None
        self._fanned: list[int] | None = None
        """Indexes of the armed step's writes that the fanout sends."""
        self._retired: list[int] = []
        """Socket duplicates of closed connections, closed once no step is armed with them."""
        self._switch = sys.getswitchinterval()
        if self.fanout is not None:
            # A thread waiting for the GIL takes it by force after this long: the helper,
            # woken at a step's end while the loop thread runs Python, waited up to the
            # default 5 ms for it (1.2–1.9 ms at its p99; 0.3 ms with this).
            sys.setswitchinterval(_SWITCH_S)

    @property
    def name(self) -> str:
        fan = self.fanout
        if fan is None:
            return "serial"
        return "two threads (Linux AIO)" + (", real-time priority" if fan.realtime else "")

    def dup(self, sock: socket.socket | None) -> int:
        """A duplicate of a new connection's socket for direct writes (-1: none). A duplicate,
        so that the number cannot name another connection before :meth:`retire`."""
        if self.fanout is None or sock is None:
            return -1
        try:
            return os.dup(sock.fileno())
        except OSError:  # out of descriptors: the transport writes
            return -1

    def retire(self, fd: int) -> None:
        """Close a connection's socket duplicate — later if a step is armed with it."""
        if fd < 0:
            return
        self._retired.append(fd)
        if self._fanned is None:
            self._close_retired()

    def arm(self, writes: list[Write], target: float) -> None:
        """Hand the fanout the writes that may go straight to their socket.

        Straight to the socket only while the transport holds no bytes back (they would be
        overtaken) — nothing but the engine writes to a streaming connection, so the check
        made now still holds at the step's end.
        """
        fan = self.fanout
        self._fanned = None
        if fan is None or not writes:
            return
        idx: list[int] = []
        jobs: list[tuple[int, bytes]] = []
        for k, (conn, data, _) in enumerate(writes):
            t = conn.transport
            if (
                conn.fd >= 0
                and t is not None
                and not t.is_closing()
                and not t.get_write_buffer_size()
            ):
                idx.append(k)
                jobs.append((conn.fd, data))
        if jobs:
            fan.arm(jobs, target)
            self._fanned = idx

    def hold_cpu(self) -> None:
        """From just before the step's end to its last write: see :mod:`servetune.sim.fanout`."""
        if self.fanout is not None:
            self.fanout.hold_cpu()

    def send(self, writes: list[Write], t_start: float) -> tuple[array[float], float, float | None]:
        """The armed share first, the rest through their transports: the write times, when
        the first write began, and when the helper thread began its half (None: no helper)."""
        fan = self.fanout
        fanned, self._fanned = self._fanned, None
        try:
            if fanned is None or fan is None:
                stamps, first, side, rest = array("d"), t_start, None, writes
            else:
                stamps = self._finish_fanout(fan, writes, fanned)
                side = fan.side_start if fan.split else None
                first = min(t_start, fan.first_send)
                skip = set(fanned)
                rest = [w for k, w in enumerate(writes) if k not in skip]
            perf, add = time.perf_counter, stamps.append
            for conn, data, _ in rest:
                t = conn.transport
                if t is not None:
                    t.write(data)
                    add(perf())
        finally:
            if fan is not None:
                fan.release_cpu()
        self._close_retired()
        return stamps, first, side

    def close(self) -> None:
        if self.fanout is not None:
            self.fanout.close()
            self.fanout = None
            sys.setswitchinterval(self._switch)
        self._fanned = None
        self._close_retired()

    @staticmethod
    def _finish_fanout(fan: Fanout, writes: list[Write], fanned: list[int]) -> array[float]:
        """The fanout's times; what a full socket refused goes to its transport, in order."""
        times, failed = fan.finish()
        if not failed:
            return times
        perf = time.perf_counter
        for j, sent in failed:
            conn, data, _ = writes[fanned[j]]
            t = conn.transport
            times[j] = math.nan
            if t is not None:
                t.write(data[sent:])
                times[j] = perf()
        return array("d", (x for x in times if not math.isnan(x)))

    def _close_retired(self) -> None:
        for fd in self._retired:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._retired.clear()
