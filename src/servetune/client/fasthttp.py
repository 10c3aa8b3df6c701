"""A lean HTTP/1.1 client on asyncio Protocols, for the load generator's hot path.

Why not aiohttp here: at thousands of streamed requests a second its per-request and
per-read machinery (request/response objects, stream readers, a coroutine wake-up per
read) costs more CPU than everything else the client does. This transport writes one
pre-assembled request, parses the status line and headers once, de-chunks in place and
hands each decoded piece, stamped on arrival, straight to the SSE stream state from
``data_received`` — no wake-up per chunk. Keep-alive connections are pooled per host.

It speaks exactly what OpenAI-compatible servers answer: a status line, headers, and a body
framed by ``Content-Length``, ``Transfer-Encoding: chunked`` or connection close. TLS is
supported through ``ssl``. Everything else (proxies, redirects, compression) is aiohttp's job.

Arrival stamps: on plain-HTTP Linux connections the reads carry the kernel's arrival time
(:mod:`servetune.client.stamped`); elsewhere (TLS, other platforms) they are stamped when the
loop gets to them.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from servetune.client.stamped import (
    StampedSocket,
    StampReads,
    connect_stamped,
    kernel_stamps_supported,
)

Sink = Callable[[bytes, int], None]

_MAX_HEAD = 64 * 1024
_ERROR_BODY_LIMIT = 4096


class HTTPError(Exception):
    """The transport failed: the message is a short, countable reason."""


class Response:
    """What came back: status, and for non-streamed bodies the first bytes."""

    __slots__ = ("body", "keep_alive", "status")

    def __init__(self) -> None:
        self.status = 0
        self.body = bytearray()
        self.keep_alive = True


class _Conn(asyncio.Protocol):
    """One keep-alive connection; serves one request at a time."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future[Response] | None = None
        self.sink: Sink | None = None
        self.resp = Response()
        self.closed = False
        self.received = False  # any response byte for the current request
        self._reset()

    def _reset(self) -> None:
        self.head = b""
        self.in_head = True
        self.chunked = False
        self.remaining = -1  # content-length bytes left; -1 = until close
        self.chunk_left = 0  # bytes left in the current chunk's data
        self.size_line = b""  # a partial chunk-size line
        self.skip_crlf = 0  # CRLF after a chunk's data still to skip
        self.trailer = False

    # -- asyncio.Protocol -----------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        w = self.waiter
        if w is not None and not w.done():
            if not self.in_head and not self.chunked and self.remaining == -1:
                self._finish(keep_alive=False)  # body framed by connection close: complete
                return
            reason = "server disconnected" if self.in_head else "connection reset mid-stream"
            w.set_exception(HTTPError(reason))
        self.waiter = None

    def data_received(self, data: bytes) -> None:
        self.pool._user_reads += 1  # only Protocol connections come here: user-space stamps
        self.received_at(data, time.perf_counter_ns())

    def received_at(self, data: bytes, now: int) -> None:
        """Bytes that arrived at ``now`` (perf_counter_ns) for the current request."""
        if self.waiter is None:
            return  # unsolicited bytes on an idle connection: ignore
        self.received = True
        if self.in_head:
            data = self._head(data)
            if not data:
                return
        if self.chunked:
            self._dechunk(data, now)
        else:
            if self.remaining >= 0:
                if len(data) >= self.remaining:
                    data = data[: self.remaining]
                    self.remaining = 0
                else:
                    self.remaining -= len(data)
            self._emit(data, now)
            if self.remaining == 0:
                self._finish(self.resp.keep_alive)

    # -- parsing --------------------------------------------------------------------------
    def _head(self, data: bytes) -> bytes:
        buf = self.head + data if self.head else data
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > _MAX_HEAD:
                self._fail("response headers too large")
            self.head = buf
            return b""
        head, rest = buf[:end], buf[end + 4 :]
        self.head = b""
        lines = head.split(b"\r\n")
        try:
            status = int(lines[0].split(b" ", 2)[1])
        except (IndexError, ValueError):
            self._fail("malformed HTTP status line")
            return b""
        if 100 <= status < 200:  # an interim response: the real one follows
            return self._head(rest) if rest else b""
        self.resp.status = status
        self.in_head = False
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                self.remaining = int(value.strip())
            elif name == b"transfer-encoding" and b"chunked" in value.lower():
                self.chunked = True
            elif name == b"connection" and b"close" in value.lower():
                self.resp.keep_alive = False
        if self.chunked:
            self.remaining = -1
        if self.remaining == 0:
            self._finish(self.resp.keep_alive)
            return b""
        return rest

    def _dechunk(self, data: bytes, now: int) -> None:
        pos, n = 0, len(data)
        while pos < n:
            if not (self.chunk_left or self.skip_crlf or self.size_line or self.trailer):
                # The common case: a whole "size CRLF data CRLF" chunk in this read.
                cr = data.find(b"\r\n", pos)
                if cr > pos:
                    try:
                        size = int(data[pos:cr], 16)
                    except ValueError:
                        size = 0
                    end = cr + 2 + size
                    if size > 0 and data[end : end + 2] == b"\r\n":
                        self._emit(data[cr + 2 : end], now)
                        pos = end + 2
                        continue
            if self.chunk_left:
                take = min(self.chunk_left, n - pos)
                self._emit(data[pos : pos + take], now)
                pos += take
                self.chunk_left -= take
                if self.chunk_left == 0:
                    self.skip_crlf = 2
                continue
            if self.skip_crlf:
                take = min(self.skip_crlf, n - pos)
                pos += take
                self.skip_crlf -= take
                continue
            nl = data.find(b"\n", pos)
            if nl < 0:
                self.size_line += data[pos:]
                return
            line = self.size_line + data[pos:nl]
            self.size_line = b""
            pos = nl + 1
            if self.trailer:  # after the last chunk: trailers until an empty line
                if not line.strip():
                    self._finish(self.resp.keep_alive)
                    return
                continue
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                self._fail("malformed chunked encoding")
                return
            if size == 0:
                self.trailer = True
            else:
                self.chunk_left = size

    def _emit(self, data: bytes, now: int) -> None:
        if not data:
            return
        if self.sink is not None and 200 <= self.resp.status < 300:
            self.sink(data, now)
        elif len(self.resp.body) < _ERROR_BODY_LIMIT:
            self.resp.body += data[: _ERROR_BODY_LIMIT - len(self.resp.body)]

    def _finish(self, keep_alive: bool) -> None:
        w, resp = self.waiter, self.resp
        self.waiter, self.sink = None, None
        self.resp = Response()
        self.received = False
        self._reset()
        if keep_alive and not self.closed:
            self.pool.release(self)
        elif self.transport is not None:
            self.transport.close()
        if w is not None and not w.done():
            w.set_result(resp)

    def _fail(self, reason: str) -> None:
        w = self.waiter
        self.waiter = None
        if self.transport is not None:
            self.transport.abort()
        if w is not None and not w.done():
            w.set_exception(HTTPError(reason))

    def abort(self) -> None:
        self.waiter = None
        self.sink = None
        if self.transport is not None:
            self.transport.abort()


class Pool:
    """Keep-alive connections to one host; a new connection whenever none is idle."""

    def __init__(self, url: str, kernel_stamps: bool = True) -> None:
        u = urlsplit(url)
        self.https = u.scheme == "https"
        self.host = u.hostname or "127.0.0.1"
        self.port = u.port or (443 if self.https else 80)
        self.path_prefix = u.path.rstrip("/")
        self.host_header = u.netloc.encode()
        self._idle: list[_Conn] = []
        self._ssl: ssl.SSLContext | None = ssl.create_default_context() if self.https else None
        self.kernel_stamps = kernel_stamps and not self.https and kernel_stamps_supported()
        self._reads: StampReads | None = StampReads() if self.kernel_stamps else None
        self._addrs: list[tuple[Any, ...]] = []
        self._user_reads = 0  # reads on Protocol connections: stamped in user space

    @property
    def kernel_reads(self) -> int:
        """Reads stamped with the kernel's arrival time."""
        return self._reads.kernel if self._reads else 0

    @property
    def user_reads(self) -> int:
        """Reads stamped when the loop got to them."""
        return self._user_reads + (self._reads.user if self._reads else 0)

    def release(self, conn: _Conn) -> None:
        self._idle.append(conn)

    async def _connect(self) -> _Conn:
        if self.kernel_stamps:
            return await self._connect_stamped()
        loop = asyncio.get_running_loop()
        try:
            _, conn = await loop.create_connection(
                lambda: _Conn(self), self.host, self.port, ssl=self._ssl
            )
        except OSError as exc:
            raise HTTPError(f"cannot connect: {exc.strerror or exc}") from exc
        return conn

    async def _connect_stamped(self) -> _Conn:
        assert self._reads is not None
        try:
            if not self._addrs:
                infos = await asyncio.get_running_loop().getaddrinfo(
                    self.host, self.port, type=socket.SOCK_STREAM
                )
                self._addrs = [(f, t, p, a) for f, t, p, _, a in infos]
            sock = await connect_stamped(self._addrs)
        except OSError as exc:
            raise HTTPError(f"cannot connect: {exc.strerror or exc}") from exc
        conn = _Conn(self)
        StampedSocket(self._reads, sock, conn)
        return conn

    async def request(self, raw: bytes, sink: Sink | None) -> Response:
        """Send pre-assembled request bytes; stream 2xx body pieces to ``sink``.

        A kept-alive connection the server closed just as we reused it (its idle timeout
        racing our send) fails before any response byte: the server never saw the request,
        so it is sent once more on a fresh connection.
        """
        conn = self._idle_conn()
        if conn is None:
            return await self._send(await self._connect(), raw, sink)
        try:
            return await self._send(conn, raw, sink)
        except HTTPError:
            if conn.received:
                raise
        return await self._send(await self._connect(), raw, sink)

    def _idle_conn(self) -> _Conn | None:
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed and conn.transport is not None and not conn.transport.is_closing():
                return conn
        return None

    async def _send(self, conn: _Conn, raw: bytes, sink: Sink | None) -> Response:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Response] = loop.create_future()
        conn.waiter, conn.sink = fut, sink
        assert conn.transport is not None
        conn.transport.write(raw)
        try:
            return await fut
        except BaseException:
            conn.abort()  # cancelled or failed: close it, so the server stops generating
            raise

    def close(self) -> None:
        for c in self._idle:
            if c.transport is not None:
                c.transport.close()
        self._idle.clear()
        if self._reads is not None:
            self._reads.close()


def build_request(pool: Pool, path: str, body: bytes, api_key: str | None) -> bytes:
    """The request bytes for a JSON POST (assembled once per request body)."""
    auth = f"Authorization: Bearer {api_key}\r\n".encode() if api_key else b""
    return (
        b"POST "
        + (pool.path_prefix + path).encode()
        + b" HTTP/1.1\r\nHost: "
        + pool.host_header
        + b"\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\n"
        + auth
        + b"Content-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )
