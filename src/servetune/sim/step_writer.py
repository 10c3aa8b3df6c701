"""How the real-time server sends a step's tokens: the writer setting.

``plain`` (the default): the loop thread writes each stream's bytes through its connection's
transport at the step's end, one write per stream.

``fanout`` (opt-in, Linux x86_64/aarch64): the writes are split with
:mod:`servetune.sim.fanout`'s helper thread and go straight to the sockets through Linux AIO
(``io_submit``, the GIL released), at real-time priority (``SCHED_FIFO`` 1) where the process
may. While it exists, the interpreter's GIL switch interval is 0.5 ms instead of 5 ms (a
process-wide setting, restored by :meth:`StepWriter.close`), so that the helper woken at a
step's end gets the GIL in time. It cut the p99 emission lag from ~6 to ~1.9 ms at 128 req/s
on a shared 2-core VM (docs/sim.md). Worth it only when the wall-clock timing of tokens on
loopback matters to what is measured: the engine's figures come from its virtual clock, and
a client's TTFT/ITL against the simulator are late by the lag either way.

Asking for ``fanout`` where Linux AIO is missing is an error at start, not a silent fallback.
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import sys
import time
from array import array
from typing import Literal, get_args

from servetune.errors import ConfigError, SimError
from servetune.http import Exchange
from servetune.sim.fanout import Fanout

WriterMode = Literal["plain", "fanout"]
WRITER_MODES: tuple[str, ...] = get_args(WriterMode)

CHUNK, LAST, WHOLE = 0, 1, 2
"""What a write is: a piece of a stream, a stream's last bytes, or a whole (non-streamed)
response body (always through the exchange, never fanned out)."""
Write = tuple[Exchange, bytes, int]

_SWITCH_S = 0.0005
"""The GIL's switch interval while the fanout's helper thread exists (default 5 ms)."""


def writer_mode(value: str) -> WriterMode:
    """``value`` checked: one of :data:`WRITER_MODES`."""
    if value not in WRITER_MODES:
        raise ConfigError.over_fields(
            f"unknown step writer {value!r}",
            hint="{writer}=plain (default) or {writer}=fanout (Linux AIO, two threads)",
        )
    return value  # type: ignore[return-value]


class StepWriter:
    """Arms a step's writes while its simulated time runs, sends them at its end."""

    def __init__(self, mode: WriterMode = "plain") -> None:
        writer_mode(mode)
        self.mode = mode
        self.fanout: Fanout | None = None
        self._switch = sys.getswitchinterval()
        if mode == "fanout":
            self.fanout = Fanout.create(realtime=True)
            if self.fanout is None:
                raise SimError.over_fields(
                    "the fanout step writer needs Linux AIO (io_submit) on x86_64 or aarch64, "
                    "which this system does not offer",
                    hint="use the plain writer ({writer}=plain, the default)",
                )
            # A thread waiting for the GIL takes it by force after this long: the helper,
            # woken at a step's end while the loop thread runs Python, waited up to the
            # default 5 ms for it (1.2–1.9 ms at its p99; 0.3 ms with this).
            sys.setswitchinterval(_SWITCH_S)
        self._fanned: list[int] | None = None
        """Indexes of the armed step's writes that the fanout sends."""
        self._retired: list[int] = []
        """Socket duplicates of closed connections, closed once no step is armed with them."""

    @property
    def name(self) -> str:
        fan = self.fanout
        if fan is None:
            return "plain"
        return "fanout: two threads (Linux AIO)" + (", real-time priority" if fan.realtime else "")

    def dup(self, sock: socket.socket | None) -> int:
        """A duplicate of a new connection's socket for direct writes (-1: none, or the plain
        writer). A duplicate, so that the number cannot name another connection before
        :meth:`retire`."""
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
        for k, (ex, data, kind) in enumerate(writes):
            conn = ex.conn
            t = conn.transport
            fd = conn.tag
            if (
                kind != WHOLE
                and isinstance(fd, int)
                and fd >= 0
                and t is not None
                and not t.is_closing()
                and not t.get_write_buffer_size()
            ):
                idx.append(k)
                jobs.append((fd, data))
        if jobs:
            fan.arm(jobs, target)
            self._fanned = idx

    def hold_cpu(self) -> None:
        """From just before the step's end to its last write: see :mod:`servetune.sim.fanout`."""
        if self.fanout is not None:
            self.fanout.hold_cpu()

    def send(self, writes: list[Write], t_start: float) -> tuple[array[float], float, float | None]:
        """The armed share first, the rest through their connections: the write times, when
        the first write began, and when the helper thread began its half (None: no helper).
        Whole responses are answered through their exchange; streams are not completed here."""
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
            for ex, data, kind in rest:
                if kind == WHOLE:
                    if not ex.finished:
                        ex.respond(200, data)
                        add(perf())
                    continue
                t = ex.conn.transport
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
            ex, data, _ = writes[fanned[j]]
            t = ex.conn.transport
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
