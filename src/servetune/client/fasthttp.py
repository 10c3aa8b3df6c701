"""A lean HTTP/1.1 client on asyncio Protocols, for the load generator's hot path.

Why not aiohttp here: at thousands of streamed requests a second its per-request and
per-read machinery (request/response objects, stream readers, a coroutine wake-up per
read) costs more CPU than everything else the client does. This transport writes one
pre-assembled request; llhttp (:class:`servetune.http.ResponseReader`) parses the response
as it is read, in place, and each de-chunked body piece goes, stamped on arrival, straight
to the SSE stream state — no wake-up per chunk. Keep-alive connections are pooled per host.

The contract with the stream layer above: a 2xx body is handed over piece by piece as
``sink(bytes, arrival_ns)``; the request's coroutine then returns the :class:`Response`
(end of stream: the body was complete) or raises :class:`HTTPError` (``"connection reset
mid-stream"``, ``"server disconnected"``, ``"malformed ..."``, ``"cannot connect: ..."``).

It speaks exactly what OpenAI-compatible servers answer: a status line, headers, and a body
framed by ``Content-Length``, ``Transfer-Encoding: chunked`` or connection close. TLS is
supported through ``ssl`` (``Pool(..., ssl_context=...)`` for a private CA). It follows no
redirect, uses no proxy and asks for no compressed body (nor does the aiohttp transport).

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
from servetune.http import ProtocolError, ResponseReader

Sink = Callable[[bytes, int], None]

_ERROR_BODY_LIMIT = 4096


class HTTPError(Exception):
    """The transport failed: the message is a short, countable reason."""


class Response:
    """What came back: status, headers, and for non-streamed bodies the first bytes."""

    __slots__ = ("body", "headers", "keep_alive", "status")

    def __init__(self) -> None:
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.body = bytearray()
        self.keep_alive = True


class _Conn(asyncio.Protocol, ResponseReader):
    """One keep-alive connection; serves one request at a time. llhttp parses the response
    (:class:`~servetune.http.ResponseReader`); each de-chunked piece of a 2xx body goes to the
    request's sink with the stamp of the read it came in."""

    def __init__(self, pool: Pool) -> None:
        ResponseReader.__init__(self)
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future[Response] | None = None
        self.sink: Sink | None = None
        self.resp = Response()
        self.closed = False
        self.received = False  # any response byte for the current request
        self.streaming = False  # the current body goes to the sink
        self.now = 0  # arrival stamp of the read being parsed

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
        meaning = self.at_close()
        w = self.waiter
        if w is not None and not w.done():
            if meaning == "complete":
                self._finish(keep_alive=False)  # body framed by connection close: complete
                return
            if meaning == "mid_body":
                w.set_exception(HTTPError("connection reset mid-stream"))
            else:
                w.set_exception(HTTPError("server disconnected"))
        self.waiter = None

    def data_received(self, data: bytes) -> None:
        self.pool._user_reads += 1  # only Protocol connections come here: user-space stamps
        self.received_at(data, time.perf_counter_ns())

    def received_at(self, data: bytes | memoryview, now: int) -> None:
        """Bytes that arrived at ``now`` (perf_counter_ns) for the current request (a
        memoryview is parsed in place: only the body pieces are copied out)."""
        if self.waiter is None:
            if not self.closed:
                self._fail("unsolicited bytes on an idle connection")
            return
        self.received = True
        self.now = now
        try:
            self.feed(data)
        except ProtocolError as exc:
            self._fail(str(exc))

    # -- the response's events (ResponseReader) ---------------------------------------------
    def on_message_begin(self) -> None:
        if self.waiter is None:  # a second response to one request
            raise ProtocolError("unsolicited response on an idle connection")
        ResponseReader.on_message_begin(self)

    def on_head(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.resp.status = status
        self.resp.headers = headers
        self.streaming = self.sink is not None and 200 <= status < 300

    def on_body(self, data: bytes) -> None:
        if self.streaming:
            self.sink(data, self.now)  # type: ignore[misc]  # streaming implies a sink
        elif len(self.resp.body) < _ERROR_BODY_LIMIT:
            self.resp.body += data[: _ERROR_BODY_LIMIT - len(self.resp.body)]

    def on_end(self, keep_alive: bool) -> None:
        self._finish(keep_alive)

    # -- the request's end ----------------------------------------------------------------
    def _finish(self, keep_alive: bool) -> None:
        w, resp = self.waiter, self.resp
        self.waiter, self.sink = None, None
        self.resp = Response()
        self.received = self.streaming = False
        resp.keep_alive = keep_alive
        if keep_alive and not self.closed:
            self.pool.release(self)
        elif self.transport is not None:
            self.transport.close()
        if w is not None and not w.done():
            w.set_result(resp)

    def _fail(self, reason: str) -> None:
        w = self.waiter
        self.waiter = None
        self.closed = True  # its parser is past saving: never reused
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

    def __init__(
        self, url: str, kernel_stamps: bool = True, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        u = urlsplit(url)
        self.https = u.scheme == "https"
        self.host = u.hostname or "127.0.0.1"
        self.port = u.port or (443 if self.https else 80)
        self.path_prefix = u.path.rstrip("/")
        self.host_header = u.netloc.encode()
        self._idle: list[_Conn] = []
        self._ssl: ssl.SSLContext | None = None
        if self.https:
            self._ssl = ssl_context or ssl.create_default_context()
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


IDENTITY = b"Accept-Encoding: identity\r\n"
"""Asked of every server: the body as it was written. A request without ``Accept-Encoding``
accepts any coding (RFC 9110), and a compressing proxy would gzip the stream: neither client
decodes it (decoding would hold tokens back and blur their arrival stamps)."""


def build_request(
    pool: Pool, path: str, body: bytes, api_key: str | None, headers: bytes = b""
) -> bytes:
    """The request bytes for a JSON POST (assembled once per request body); ``headers``:
    extra header lines, each ``Name: value\r\n``."""
    auth = f"Authorization: Bearer {api_key}\r\n".encode() if api_key else b""
    return (
        b"POST "
        + (pool.path_prefix + path).encode()
        + b" HTTP/1.1\r\nHost: "
        + pool.host_header
        + b"\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\n"
        + IDENTITY
        + auth
        + headers
        + b"Content-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )
