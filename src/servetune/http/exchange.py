"""One request and its one response: :class:`Exchange`.

The connection (:mod:`servetune.http.connection`) parses a request into an exchange and hands
it to the handler, which answers it exactly once — a whole response (:meth:`Exchange.respond`)
or a chunked stream (:meth:`Exchange.start` … :meth:`Exchange.end`). The exchange frames the
bytes and writes them through its connection, and tells the connection when the response is
complete so that the next request can be answered. See :mod:`servetune.http` for the API as a
whole.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from servetune.http import wire

Handler = Callable[["Exchange"], Awaitable[None] | None]
"""Answers an exchange: a plain function, or a coroutine function (run as a task)."""

NEW, STREAMING, DONE = 0, 1, 2
"""The values of :attr:`Exchange.state`: not answered yet, streaming, complete."""
_ZERO_COPY_MIN = 8192
"""Chunks at least this big go out as three buffers (size line, data, CRLF) with
``writelines`` instead of being copied into one."""


class Server(Protocol):
    """What an exchange asks of its server (an :class:`~servetune.http.server.HTTPServer`)."""

    @property
    def draining(self) -> bool: ...

    def error_body(self, status: int, message: str, type_: str | None = None) -> bytes: ...


class Connection(Protocol):
    """The connection an exchange arrived on and is answered through: a
    :class:`~servetune.http.connection.ServerConnection`, which says what each member does
    (described here only so that the modules import one way)."""

    tag: Any

    @property
    def server(self) -> Server: ...
    @property
    def transport(self) -> asyncio.Transport | None: ...
    @property
    def sock(self) -> socket.socket | None: ...
    @property
    def closed(self) -> bool: ...
    @property
    def buffered(self) -> int: ...
    @property
    def peer(self) -> Any: ...
    def write(self, data: bytes) -> None: ...
    def writelines(self, parts: tuple[bytes, ...] | list[bytes]) -> None: ...
    async def drain(self) -> None: ...
    def close(self) -> None: ...
    def abort(self) -> None: ...
    def busy(self) -> bool: ...
    def _finished(self, ex: Exchange, close: bool) -> None: ...


class Exchange:
    """One request and its response.

    Request: ``method`` (``"GET"``), ``path`` (without the query, ``str``), ``query``
    (``str``, may be empty), ``headers`` (``(name, value)`` byte pairs, names lower-case, in
    order), ``body`` (``bytes``), ``arrival_ns`` (``time.perf_counter_ns()`` when its first
    byte was read), ``keep_alive``, ``http10``. ``conn`` is the connection
    (:class:`~servetune.http.connection.ServerConnection`);
    ``tag`` is the application's.
    """

    __slots__ = (
        "_chunked",
        "_held",
        "_parts",
        "arrival_ns",
        "body",
        "close_after",
        "conn",
        "headers",
        "http10",
        "keep_alive",
        "method",
        "on_close",
        "path",
        "query",
        "state",
        "tag",
        "target",
    )

    def __init__(self, conn: Connection, arrival_ns: int) -> None:
        self.conn = conn
        self.arrival_ns = arrival_ns
        self.method = ""
        self.target = b""
        self.path = ""
        self.query = ""
        self.headers: list[tuple[bytes, bytes]] = []
        self.body = b""
        self._parts: list[bytes] = []
        self.keep_alive = True
        self.http10 = False
        self.state = NEW
        self.close_after = False
        """Close the connection once this response is complete."""
        self._chunked = True
        self._held = b""
        self.on_close: Callable[[], None] | None = None
        """Called (once) if the connection is lost before the response is complete."""
        self.tag: Any = None

    # -- the request ----------------------------------------------------------------------
    def header(self, name: bytes, default: bytes | None = None) -> bytes | None:
        """The first value of header ``name`` (lower-case bytes)."""
        for k, v in self.headers:
            if k == name:
                return v
        return default

    # -- the response ---------------------------------------------------------------------
    @property
    def responded(self) -> bool:
        """Has the response begun (head written)?"""
        return self.state != NEW

    @property
    def finished(self) -> bool:
        return self.state == DONE

    @property
    def chunked(self) -> bool:
        """Whether the stream is framed in chunks (False for HTTP/1.0 peers: the body ends
        when the connection closes). Callers that frame bytes themselves check it."""
        return self._chunked

    def respond(
        self,
        status: int,
        body: bytes = b"",
        content_type: bytes | None = wire.JSON,
        headers: wire.Headers = (),
    ) -> None:
        """A whole response (``Content-Length``), the exchange's only one."""
        if self.state != NEW:
            raise RuntimeError("this request has been answered already")
        self.state = DONE
        close = self._closing()
        conn = self.conn
        conn.write(wire.head(status, content_type, len(body), headers, close) + body)
        conn._finished(self, close)

    def respond_json(self, status: int, obj: Any, headers: wire.Headers = ()) -> None:
        import orjson

        self.respond(status, orjson.dumps(obj), wire.JSON, headers)

    def error(self, status: int, message: str, type_: str | None = None) -> None:
        """An error response, in the body format of the server's ``error_body``."""
        self.respond(status, self.conn.server.error_body(status, message, type_))

    def start(
        self,
        status: int = 200,
        content_type: bytes | None = wire.SSE,
        headers: wire.Headers = (),
        flush: bool = True,
    ) -> None:
        """Begin a streamed response (chunked; to an HTTP/1.0 peer, ended by closing).
        ``flush=False`` holds the head back until the first piece, to go out in one write."""
        if self.state != NEW:
            raise RuntimeError("this request has been answered already")
        self.state = STREAMING
        if self.http10:
            self._chunked = False
            self.close_after = True
        length = None if self._chunked else -1
        head = wire.head(status, content_type, length, headers, self._closing())
        if flush:
            self.conn.write(head)
        else:
            self._held = head

    def send(self, data: bytes) -> None:
        """One piece of the streamed body (framed here; large pieces are not copied)."""
        if data and self.state == STREAMING:
            self._out(data, b"\r\n" if self._chunked else b"")

    def frame(self, data: bytes, last: bool = False) -> bytes:
        """``data`` framed for this stream (and the end of the body when ``last``), for
        callers that assemble the bytes early and write them later (:meth:`send_framed`)."""
        if not self._chunked:
            return data
        return wire.frame_last(data) if last else wire.frame(data)

    def send_framed(self, framed: bytes) -> None:
        """Bytes already framed by :meth:`frame`."""
        if self.state == STREAMING:
            if self._held:
                framed, self._held = self._held + framed, b""
            self.conn.write(framed)

    def end(self, data: bytes = b"") -> None:
        """The last piece (optional) and the end of the streamed body."""
        if self.state != STREAMING:
            return
        if not self._chunked:
            if data or self._held:
                self._out(data, b"")
        elif data:
            self._out(data, b"\r\n0\r\n\r\n")
        else:
            self.send_framed(wire.LAST_CHUNK)
        self.complete()

    def _out(self, data: bytes, tail: bytes) -> None:
        """Write ``data`` (with its size line when chunked, the held head first) and
        ``tail``: one small buffer, or several without copying a large ``data``."""
        size = b"%x\r\n" % len(data) if self._chunked else b""
        held = self._held
        if len(data) < _ZERO_COPY_MIN:
            self.conn.write(held + size + data + tail if held else size + data + tail)
        else:
            self.conn.writelines([held + size, data, tail] if tail else [held + size, data])
        self._held = b""

    def complete(self) -> None:
        """The streamed body's end was written by the caller (:meth:`frame` with ``last``, or
        straight to the socket): the connection moves on to the next request."""
        if self.state == DONE:
            return
        self.state = DONE
        close = self.close_after or not self._chunked
        self.conn._finished(self, close)

    def abort(self) -> None:
        """Drop the connection without completing the response (the client sees a reset)."""
        self.conn.abort()

    async def drain(self) -> None:
        """Wait while the connection's send buffer is over its high-water mark."""
        await self.conn.drain()

    def _closing(self) -> bool:
        if not self.keep_alive or self.conn.server.draining:
            self.close_after = True
        return self.close_after
