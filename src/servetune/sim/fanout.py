"""Write one engine step's chunks to many sockets from two threads at once (Linux AIO).

Why: a step of the real-time server ends with one write per running stream (256 at the
seed's configuration), and each loopback TCP send costs 9–18 µs of kernel time on the
reference VM (the receiver's TCP path runs inside the sender's system call), so one thread
needs 2.5–4.5 ms to write a step and the last stream's token lags by all of it. Two threads
on two cores halve that, but only outside the GIL: a Python loop of ``os.write`` takes the GIL
back after every send, and two such loops measured no faster than one. Linux AIO
(``io_submit`` with ``IOCB_CMD_PWRITE``) sends a whole list of buffers in one system call,
which ``ctypes`` makes with the GIL released; on a socket the writes complete inside the
call (non-blocking: a full socket answers ``-EAGAIN``, never queues in the kernel).

Each thread submits its half in chunks of :data:`CHUNK` writes and notes the time after each
chunk: a write's time is the end of its chunk's call, never before the bytes were sent. The
helper thread is armed while the step's simulated time runs and sleeps until the step's end
on its own (waking a thread at that moment costs 0.3–1 ms on the shared VM, as much as the
half it would write).

Both threads write at the lowest real-time priority (``SCHED_FIFO`` 1) where the process may
(CAP_SYS_NICE): at normal priority the client, woken by the very first writes, preempted one
writer for 2.5–5 ms in about one step in three (one chunk of 16 sends took 3–5 ms instead of
0.15 ms), which made the p99. The loop thread holds that priority only from just before the
step's end to its last write, the helper only ever runs then: a few ms in every ~50.

The file descriptors handed in must stay open (and mean the same socket) from :meth:`arm`
until :meth:`finish` returns: the server passes duplicates it closes only between steps.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import platform
import struct
import sys
import threading
import time
from array import array

CHUNK = 16
"""Writes per ``io_submit`` call: the granularity of the write times (16 sends ≈ 0.15 ms)."""
MIN_SPLIT = 2 * CHUNK
"""A step with fewer writes is written by the loop thread alone (not worth a second core)."""

_SYSCALLS = {  # io_setup, io_destroy, io_getevents, io_submit
    "x86_64": (206, 207, 208, 209),
    "aarch64": (0, 1, 4, 2),
}
_IOCB = struct.Struct("<QIiHhIQQqQII")  # struct iocb (little-endian layout), 64 bytes
_EVENT = struct.Struct("<Q8xq8x")  # struct io_event: data, res
_PWRITE = 1  # IOCB_CMD_PWRITE


class _Aio:
    """The four AIO system calls through libc's ``syscall`` (ctypes releases the GIL)."""

    def __init__(self) -> None:
        nums = _SYSCALLS.get(platform.machine())
        if not sys.platform.startswith("linux") or nums is None:
            raise OSError("Linux AIO system call numbers unknown on this platform")
        self.setup_n, self.destroy_n, self.getevents_n, self.submit_n = (
            ctypes.c_long(n) for n in nums
        )
        libc = ctypes.CDLL(None, use_errno=True)
        self.syscall = libc.syscall
        self.syscall.restype = ctypes.c_long
        self.getcpu = libc.sched_getcpu
        self.getcpu.restype = ctypes.c_int

    def check(self, r: int, what: str) -> int:
        if r < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"{what}: {os.strerror(err)}")
        return r


class _Half:
    """One thread's share of a step: its AIO context, iocbs, and when each chunk was sent."""

    def __init__(self, aio: _Aio) -> None:
        self.aio = aio
        self.ctx = ctypes.c_ulong(0)
        aio.check(
            aio.syscall(aio.setup_n, ctypes.c_long(CHUNK), ctypes.byref(self.ctx)), "io_setup"
        )
        self.events = ctypes.create_string_buffer(_EVENT.size * CHUNK)
        self.timeout = (ctypes.c_long * 2)(5, 0)  # a socket write never waits: a safety net
        self.cap = 0
        self.cbs = ctypes.create_string_buffer(0)
        self.ptrs = (ctypes.c_void_p * 0)()
        self.blob = b""
        self.sizes: list[int] = []
        self.ends = array("d")
        """perf_counter() after each chunk's ``io_submit`` returned."""
        self.failed: list[tuple[int, int]] = []
        """(index in this half, bytes sent) of the writes that did not send everything."""

    def _grow(self, n: int) -> None:
        cap = max(n, 2 * self.cap, 256)
        self.cbs = ctypes.create_string_buffer(_IOCB.size * cap)
        base = ctypes.addressof(self.cbs)
        self.ptrs = (ctypes.c_void_p * cap)(*(base + _IOCB.size * i for i in range(cap)))
        self.cap = cap

    def fill(self, jobs: list[tuple[int, bytes]]) -> None:
        """Prepare one iocb per (fd, bytes); the bytes live in one buffer until :meth:`send`."""
        if len(jobs) > self.cap:
            self._grow(len(jobs))
        self.blob = b"".join(d for _, d in jobs)
        addr = ctypes.cast(ctypes.c_char_p(self.blob), ctypes.c_void_p).value or 0
        self.sizes = [len(d) for _, d in jobs]
        pack, cbs = _IOCB.pack_into, self.cbs
        for i, (fd, d) in enumerate(jobs):
            pack(cbs, _IOCB.size * i, i, 0, 0, _PWRITE, 0, fd, addr, len(d), 0, 0, 0, 0)
            addr += len(d)
        self.ends = array("d")
        self.failed = []

    def send(self) -> None:
        """Submit every prepared write, :data:`CHUNK` at a time."""
        aio, n = self.aio, len(self.sizes)
        perf, base = time.perf_counter, ctypes.addressof(self.ptrs)
        for lo in range(0, n, CHUNK):
            k = min(CHUNK, n - lo)
            r = aio.syscall(
                aio.submit_n, self.ctx, ctypes.c_long(k), ctypes.c_void_p(base + 8 * lo)
            )
            self.ends.append(perf())
            done = max(r, 0)
            if done:
                self._reap(done)
            # iocbs the kernel refused (r < k) were not sent at all
            self.failed.extend((i, 0) for i in range(lo + done, lo + k))
        self.blob = b""

    def _reap(self, n: int) -> None:
        """Read the results of the ``n`` writes just submitted (all complete by now)."""
        aio = self.aio
        sizes, failed, unpack = self.sizes, self.failed, _EVENT.unpack_from
        while n > 0:
            got = aio.syscall(
                aio.getevents_n,
                self.ctx,
                ctypes.c_long(n),
                ctypes.c_long(n),
                self.events,
                self.timeout,
            )
            if got < 0 and ctypes.get_errno() == errno.EINTR:
                continue  # a signal landed on this thread: the events are still there
            if aio.check(got, "io_getevents") == 0:
                raise OSError(errno.ETIME, "io_getevents: socket writes did not complete")
            for j in range(got):
                i, res = unpack(self.events, _EVENT.size * j)
                if res != sizes[i]:
                    failed.append((i, max(res, 0)))
            n -= got

    def close(self) -> None:
        if self.ctx.value:
            self.aio.syscall(self.aio.destroy_n, self.ctx)
            self.ctx.value = 0


def _fifo(on: bool) -> bool:
    """The calling thread to ``SCHED_FIFO`` 1 (on) or back to normal; False if not permitted."""
    try:
        if on:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        else:
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    except (OSError, AttributeError):
        return False
    return True


class Fanout:
    """Writes a step's (fd, bytes) list from the calling thread and one helper thread."""

    def __init__(self, realtime: bool = True) -> None:
        self.realtime = realtime
        """Write at real-time priority (dropped at the first refusal)."""
        self._held = False
        aio = _Aio()
        self._aio = aio
        self._main = _Half(aio)
        try:
            self._side = _Half(aio)
        except OSError:
            self._main.close()
            raise
        self._target = 0.0
        self._split = 0
        self.split = False
        """Whether the armed step's writes are shared with the helper thread."""
        self.side_start = 0.0
        """perf_counter() when the helper began its last half."""
        self.first_send = 0.0
        """perf_counter() when the last step's first write began (either thread)."""
        self._go = threading.Semaphore(0)
        self._done = threading.Semaphore(0)
        self._armed = False
        self._closing = False
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._helper, name="sim-fanout", daemon=True)
        self._thread.start()
        self._cpus = os.sched_getaffinity(0)
        self._avoided = -1

    @classmethod
    def create(cls, realtime: bool = True) -> Fanout | None:
        """A fanout, or None where Linux AIO is not available (the caller writes serially)."""
        try:
            return cls(realtime)
        except (OSError, AttributeError):
            return None

    def hold_cpu(self) -> None:
        """Real-time priority for the calling thread until :meth:`release_cpu` (the step's end
        and its writes)."""
        if self.realtime and not self._held:
            self._held = _fifo(True)
            self.realtime = self._held

    def release_cpu(self) -> None:
        if self._held:
            _fifo(False)
            self._held = False

    def arm(self, jobs: list[tuple[int, bytes]], target: float) -> None:
        """Prepare ``jobs``; the helper sends the second half at ``target`` (perf_counter)."""
        assert not self._armed, "finish() the previous step first"
        split = len(jobs) // 2 if len(jobs) >= MIN_SPLIT else len(jobs)
        self._main.fill(jobs[:split])
        self._split = split
        self._armed = True
        self.split = split < len(jobs)
        if self.split:
            self._keep_apart()
            self._side.fill(jobs[split:])
            self._target = target
            self._go.release()
        else:
            self._side.sizes = []

    def finish(self) -> tuple[array[float], list[tuple[int, int]]]:
        """Send the first half now, wait for the helper's; per job the time its chunk was
        sent, and (job index, bytes sent) of the jobs that did not send everything."""
        assert self._armed
        self.first_send = time.perf_counter()
        self._main.send()
        if self._side.sizes:
            self._done.acquire()
            self.first_send = min(self.first_send, self.side_start)
        self._armed = False
        if self._error is not None:
            raise self._error
        times = array("d")
        for half in (self._main, self._side):
            n = len(half.sizes)
            for c, end in enumerate(half.ends):
                times.extend([end] * min(CHUNK, n - c * CHUNK))
        failed = self._main.failed + [(self._split + i, s) for i, s in self._side.failed]
        return times, failed

    def _keep_apart(self) -> None:
        """Keep the helper off the CPU the loop thread runs on.

        Left to itself the scheduler wakes both threads on one CPU at the step's end, and the
        loop thread waits there for the helper's whole half (measured: the loop thread wrote
        1.3 ms after the step's end instead of 0.2 ms). The loop thread itself stays free to
        move; the helper follows it whenever it does.
        """
        cpu = self._aio.getcpu()
        if cpu == self._avoided or len(self._cpus) < 2 or cpu not in self._cpus:
            return
        tid = self._thread.native_id
        if tid is not None:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(tid, self._cpus - {cpu})
        self._avoided = cpu

    def _helper(self) -> None:
        if self.realtime:
            _fifo(True)  # this thread runs only at steps' ends
        while True:
            self._go.acquire()
            if self._closing:
                return
            delay = self._target - time.perf_counter()
            if delay > 0:
                time.sleep(delay)  # clock_nanosleep, GIL released: wakes on the step's end
            self.side_start = time.perf_counter()
            try:
                self._side.send()
            except BaseException as exc:  # handed to finish(): a dead helper would hang it
                self._error = exc
            finally:
                self._done.release()

    def close(self) -> None:
        self._closing = True
        self._go.release()
        self._thread.join(timeout=5)
        with contextlib.suppress(OSError):
            self._main.close()
            self._side.close()
