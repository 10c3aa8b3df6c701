"""The upstream side of the proxy: kept-alive connections to each engine, responses parsed by
servetune's HTTP layer (:class:`~servetune.http.ResponseReader`, llhttp) and passed to the
client as they arrive.

:class:`UpstreamConnection` is an asyncio protocol: each piece of the upstream's body is handed,
inside ``data_received``, to the request's :class:`Relay`, which writes it to the client's
connection at once — no queue, no task switch, no copy beyond the chunk framing. When the
client's socket buffer fills, reading from the upstream pauses until it drains (back-pressure
instead of buffering). :class:`ConnectionPool` keeps idle connections per upstream; a reused
connection that the server had closed (llama-server closes after every stream while announcing
keep-alive) fails before any response byte and is replaced by a fresh one, which is not an
upstream failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from typing import Protocol

from servetune.http import ProtocolError, ResponseReader

_MAX_IDLE = 512


class RelaySink(Protocol):
    """What a connection reports to the request it carries."""

    def on_head(self, status: int, headers: list[tuple[bytes, bytes]]) -> None: ...

    def on_body(self, data: bytes) -> None: ...

    def flush(self) -> None:
        """The bytes of one read have all been handed over (write them out now)."""
        ...

    def on_end(self, keep_alive: bool) -> None: ...

    def on_lost(self, meaning: str, error: str) -> None: ...


class UpstreamConnection(asyncio.Protocol, ResponseReader):
    def __init__(self, pool: ConnectionPool) -> None:
        ResponseReader.__init__(self)
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.sink: RelaySink | None = None
        self.closed = False
        self.keep = False
        self.idle_since_ns = 0
        """When it went back to the pool (``perf_counter_ns``): how long a reused one sat
        idle before its request (see :data:`servetune.gateway.failover.RACE_IDLE_S`)."""
        self._paused = False

    # -- asyncio -----------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        sink = self.sink
        try:
            self.feed(data)
        except ProtocolError as exc:
            sink, self.sink = self.sink, None
            self.abort()
            if sink is not None:
                sink.on_lost("protocol", str(exc))
            return
        if sink is not None:
            sink.flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.transport = None
        self.pool.forget(self)
        sink, self.sink = self.sink, None
        if sink is not None:
            sink.on_lost(self.at_close(), str(exc) if exc else "connection closed")

    # -- ResponseReader ----------------------------------------------------------------------
    def on_head(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        if self.sink is not None:
            self.sink.on_head(status, headers)

    def on_body(self, data: bytes) -> None:
        if self.sink is not None:
            self.sink.on_body(data)

    def on_end(self, keep_alive: bool) -> None:
        sink, self.sink = self.sink, None
        self.keep = keep_alive
        if sink is not None:
            sink.on_end(keep_alive)

    # -- use ---------------------------------------------------------------------------------
    def send(self, data: bytes, sink: RelaySink) -> None:
        self.sink = sink
        assert self.transport is not None
        self.transport.write(data)

    def pause(self) -> None:
        if not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()

    def resume(self) -> None:
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()

    def abort(self) -> None:
        """Close now (the upstream sees the disconnect and aborts the request)."""
        self.sink = None
        if self.transport is not None:
            self.transport.abort()


class ConnectionPool:
    """Idle kept-alive connections to one upstream (host, port)."""

    def __init__(self, host: str, port: int, connect_timeout_s: float = 5.0) -> None:
        self.host = host
        self.port = port
        self.connect_timeout_s = connect_timeout_s
        self.idle: list[UpstreamConnection] = []
        self.open = 0

    def take(self) -> UpstreamConnection | None:
        """An idle connection, if one is open (the most recently used)."""
        idle = self.idle
        while idle:
            conn = idle.pop()
            if not conn.closed and conn.transport is not None and not conn.in_response:
                return conn
        return None

    async def get(self) -> tuple[UpstreamConnection, bool]:
        """(a connection, whether it was reused): an idle one, else a new one."""
        conn = self.take()
        if conn is not None:
            return conn, True
        loop = asyncio.get_running_loop()
        _, proto = await asyncio.wait_for(
            loop.create_connection(lambda: UpstreamConnection(self), self.host, self.port),
            self.connect_timeout_s,
        )
        self.open += 1
        return proto, False

    def put(self, conn: UpstreamConnection) -> None:
        if conn.closed or not conn.keep or conn.in_response or len(self.idle) >= _MAX_IDLE:
            conn.abort()
            return
        conn.resume()
        conn.idle_since_ns = time.perf_counter_ns()
        self.idle.append(conn)

    def forget(self, conn: UpstreamConnection) -> None:
        self.open -= 1
        with contextlib.suppress(ValueError):
            self.idle.remove(conn)

    def close(self) -> None:
        for conn in self.idle:
            conn.abort()
        self.idle.clear()


class _Collect:
    """A sink that keeps a whole (small) response: for /metrics and /v1/models."""

    def __init__(self, limit: int) -> None:
        self.fut: asyncio.Future[tuple[int, list[tuple[bytes, bytes]], bytes]] = (
            asyncio.get_running_loop().create_future()
        )
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.parts: list[bytes] = []
        self.size = 0
        self.limit = limit

    def on_head(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.status, self.headers = status, headers

    def flush(self) -> None:
        return None

    def on_body(self, data: bytes) -> None:
        self.size += len(data)
        if self.size <= self.limit:
            self.parts.append(data)

    def on_end(self, keep_alive: bool) -> None:
        if not self.fut.done():
            self.fut.set_result((self.status, self.headers, b"".join(self.parts)))

    def on_lost(self, meaning: str, error: str) -> None:
        if self.fut.done():
            return
        if meaning == "complete":
            self.on_end(False)
        else:
            self.fut.set_exception(ConnectionError(f"{error} ({meaning.replace('_', ' ')})"))


async def fetch(
    pool: ConnectionPool,
    method: str,
    path: str,
    headers: bytes = b"",
    timeout_s: float = 5.0,
    limit: int = 16 * 1024 * 1024,
    body: bytes | None = None,
) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """One small request on a pooled connection: (status, headers, body). Raises OSError,
    ConnectionError or TimeoutError."""
    if body is not None:
        headers += b"Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
    for attempt in (0, 1):
        conn, reused = await pool.get()
        sink = _Collect(limit)
        conn.send(
            b"%s %s HTTP/1.1\r\nHost: %s:%d\r\n%s\r\n%s"
            % (method.encode(), path.encode(), pool.host.encode(), pool.port, headers, body or b""),
            sink,
        )
        try:
            result = await asyncio.wait_for(asyncio.shield(sink.fut), timeout_s)
        except ConnectionError:
            conn.abort()
            if reused and attempt == 0:
                continue  # the server had closed the idle connection: once more, fresh
            raise
        except (TimeoutError, asyncio.CancelledError):
            conn.abort()
            raise
        pool.put(conn)
        return result
    raise ConnectionError("unreachable")  # pragma: no cover
