"""Sockets whose reads carry the kernel's arrival time, for the fast HTTP transport.

A stamp taken in user space when the loop gets to a read is late by however long the loop
was busy with other streams (or the process was off the CPU): at thousands of streams a
second that is milliseconds at p99, and it lands in TTFT. On plain-HTTP Linux connections
the transport therefore reads the socket itself with ``recvmsg`` and takes, from
``SO_TIMESTAMPNS``, the time the kernel received the bytes, converted to the run's clock
(CLOCK_MONOTONIC). A read without a kernel stamp (the first packets while the kernel turns
timestamping on, other platforms) is stamped in user space; :class:`StampReads` counts both.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import sys
import time
from typing import Any, Protocol

_SO_TIMESTAMPNS: int | None = getattr(socket, "SO_TIMESTAMPNS", None)
if _SO_TIMESTAMPNS is None and sys.platform.startswith("linux"):
    _SO_TIMESTAMPNS = 35  # Linux's value; Python exposes it only from 3.12 on some builds
_READ_SIZE = 256 * 1024
# struct timespec as SO_TIMESTAMPNS delivers it: two C longs (16 bytes on 64-bit Linux).
_TIMESPEC = struct.Struct("@ll")
_ANC_SIZE = socket.CMSG_SPACE(_TIMESPEC.size) if hasattr(socket, "CMSG_SPACE") else 0
# A kernel stamp older than this is not believed (the wall clock was stepped mid-run).
_MAX_STAMP_AGE_NS = 2_000_000_000


def kernel_stamps_supported() -> bool:
    """Can this platform stamp arrivals in the kernel (``SO_TIMESTAMPNS`` + ``recvmsg``)?"""
    return _SO_TIMESTAMPNS is not None and hasattr(socket.socket, "recvmsg_into") and _ANC_SIZE > 0


class StampedProtocol(Protocol):
    """What a :class:`StampedSocket` calls: asyncio's Protocol, with the arrival time."""

    def connection_made(self, transport: Any) -> None: ...

    def received_at(self, data: bytes | memoryview, now: int) -> None: ...

    def connection_lost(self, exc: Exception | None) -> None: ...


class StampReads:
    """The read buffer shared by the sockets of one loop, and who stamped their reads."""

    def __init__(self) -> None:
        # One buffer for every connection: reads never interleave on one loop.
        self.views = [memoryview(bytearray(_READ_SIZE))]
        self.kernel = 0
        self.user = 0
        # The kernel turns receive timestamping on lazily, some time after the first socket
        # asks; asking now means the run's first responses already carry stamps.
        self._keeper = _stamping_socket()

    def close(self) -> None:
        if self._keeper is not None:
            self._keeper.close()
            self._keeper = None


class StampedSocket:
    """The slice of ``asyncio.Transport`` the HTTP connection uses, over a plain socket read
    with ``recvmsg`` so that each read carries the kernel's arrival time."""

    def __init__(self, reads: StampReads, sock: socket.socket, protocol: StampedProtocol) -> None:
        self.loop = asyncio.get_running_loop()
        self.reads = reads
        self.sock = sock
        self.fd = sock.fileno()
        self.protocol = protocol
        self.wbuf = bytearray()
        self.closing = False
        self.gone = False
        protocol.connection_made(self)
        self.loop.add_reader(self.fd, self._readable)

    # -- the Transport methods the connection calls -----------------------------------------
    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.sock if name == "socket" else default

    def is_closing(self) -> bool:
        return self.closing

    def write(self, data: bytes) -> None:
        if self.closing:
            return
        if not self.wbuf:
            try:
                sent = self.sock.send(data)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError as exc:
                self._drop(exc)
                return
            if sent == len(data):
                return
            self.loop.add_writer(self.fd, self._writable)
            data = data[sent:]
        self.wbuf += data

    def close(self) -> None:
        """Close once the queued bytes are out."""
        self.closing = True
        if not self.wbuf:
            self._drop(None)

    def abort(self) -> None:
        self.closing = True
        self._drop(None)

    # -- event-loop callbacks -------------------------------------------------------------
    def _readable(self) -> None:
        reads = self.reads
        try:
            n, anc, _, _ = self.sock.recvmsg_into(reads.views, _ANC_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._drop(exc)
            return
        if n == 0:
            self._drop(None)  # the server closed its side
            return
        if anc and len(anc[0][2]) >= _TIMESPEC.size:
            # Age of the bytes by the wall clock the kernel stamped them with, moved onto
            # the monotonic clock the run is timed on. The wall clock is read first: if the
            # process is taken off the CPU between the two reads, the stamp comes out late
            # by that time — never early, never before the server wrote the bytes (read the
            # other way round, a preemption on a loaded CI box once put a first token more
            # than 0.5 ms before the server wrote it).
            wall = time.time_ns()
            now = time.perf_counter_ns()
            sec, nsec = _TIMESPEC.unpack_from(anc[0][2])
            age = wall - (sec * 1_000_000_000 + nsec)
            if 0 <= age < _MAX_STAMP_AGE_NS:
                now -= age
                reads.kernel += 1
            else:
                reads.user += 1
        else:
            now = time.perf_counter_ns()
            reads.user += 1
        # The shared buffer itself: the parser reads it in place and copies out only the
        # body pieces (the next read reuses the buffer, so nothing may keep this view).
        self.protocol.received_at(reads.views[0][:n], now)

    def _writable(self) -> None:
        try:
            sent = self.sock.send(self.wbuf)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._drop(exc)
            return
        del self.wbuf[:sent]
        if not self.wbuf:
            self.loop.remove_writer(self.fd)
            if self.closing:
                self._drop(None)

    def _drop(self, exc: Exception | None) -> None:
        """Release the socket now; the protocol hears of it on the next loop turn."""
        if self.gone:
            return
        self.gone = self.closing = True
        self.loop.remove_reader(self.fd)
        if self.wbuf:
            self.loop.remove_writer(self.fd)
            self.wbuf.clear()
        self.sock.close()
        self.loop.call_soon(self.protocol.connection_lost, exc)


async def connect_stamped(addrs: list[tuple[Any, ...]]) -> socket.socket:
    """A connected non-blocking socket, stamping its reads, to the first address that answers
    (``(family, type, proto, sockaddr)`` tuples); the last error if none does."""
    loop = asyncio.get_running_loop()
    error: OSError | None = None
    for family, type_, proto, addr in addrs:
        sock = socket.socket(family, type_, proto)
        sock.setblocking(False)
        try:
            await loop.sock_connect(sock, addr)
        except OSError as exc:
            sock.close()
            error = exc
            continue
        except BaseException:
            sock.close()
            raise
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS or 0, 1)
        except OSError:
            pass  # no kernel stamps here: reads are stamped in user space
        return sock
    raise error or OSError("no address to connect to")


def _stamping_socket() -> socket.socket | None:
    """A socket that only holds the kernel's receive timestamping on."""
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    except OSError:
        return None
    try:
        s.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS or 0, 1)
    except OSError:
        s.close()
        return None
    return s
