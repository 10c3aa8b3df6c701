"""The server side: connections parsed by llhttp, one :class:`Exchange` per request.

See :mod:`servetune.http` for the API as a whole. In short::

    server = HTTPServer(handler)            # handler(ex) -> None, or a coroutine
    port = await server.start("127.0.0.1", 0)
    ...
    await server.drain(timeout_s=30)        # stop accepting, finish what is in flight

A connection parses every byte as it arrives (llhttp, in C; the Python callbacks only collect
the URL, the headers and the body). Requests are answered one at a time and in order (HTTP/1.1
has no other way): a request parsed while another is being answered waits in the connection's
queue, and reading pauses when :attr:`Limits.max_pipelined` are waiting.

A handler answers its :class:`Exchange` exactly once — a whole response (:meth:`Exchange.respond`)
or a chunked stream (:meth:`Exchange.start` … :meth:`Exchange.end`). A plain function may leave
the response open and finish it later from anywhere on the loop (the simulated engine does); a
coroutine runs as a task that must have finished its response when it returns, and is cancelled
when the client goes away. Either way :attr:`Exchange.on_close` is called if the connection is
lost before the response is complete.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httptools

from servetune.http import wire

log = logging.getLogger("servetune.http")

Handler = Callable[["Exchange"], Awaitable[None] | None]
ErrorBody = Callable[[int, str], bytes]

_NEW, _STREAMING, _DONE = 0, 1, 2
_METHODS = {m.encode(): m for m in ("GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH")}
_ZERO_COPY_MIN = 8192
"""Chunks at least this big go out as three buffers (size line, data, CRLF) with
``writelines`` instead of being copied into one."""


@dataclass(frozen=True)
class Limits:
    """What one connection may send before it is refused or paused."""

    max_head_bytes: int = 64 * 1024
    """Request line and headers (431 beyond)."""
    max_body_bytes: int = 64 * 1024 * 1024
    """Request body (413 beyond)."""
    max_pipelined: int = 16
    """Parsed requests waiting for their turn; reading pauses beyond."""
    keepalive_timeout_s: float | None = 75.0
    """An idle keep-alive connection is closed after this long (None: never)."""


class Exchange:
    """One request and its response.

    Request: ``method`` (``"GET"``), ``path`` (without the query, ``str``), ``query``
    (``str``, may be empty), ``headers`` (``(name, value)`` byte pairs, names lower-case, in
    order), ``body`` (``bytes``), ``arrival_ns`` (``time.perf_counter_ns()`` when its first
    byte was read), ``keep_alive``, ``http10``. ``conn`` is the :class:`ServerConnection`;
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

    def __init__(self, conn: ServerConnection, arrival_ns: int) -> None:
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
        self.state = _NEW
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
        return self.state != _NEW

    @property
    def finished(self) -> bool:
        return self.state == _DONE

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
        if self.state != _NEW:
            raise RuntimeError("this request has been answered already")
        self.state = _DONE
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
        if self.state != _NEW:
            raise RuntimeError("this request has been answered already")
        self.state = _STREAMING
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
        if data and self.state == _STREAMING:
            self._out(data, b"\r\n" if self._chunked else b"")

    def frame(self, data: bytes, last: bool = False) -> bytes:
        """``data`` framed for this stream (and the end of the body when ``last``), for
        callers that assemble the bytes early and write them later (:meth:`send_framed`)."""
        if not self._chunked:
            return data
        return wire.frame_last(data) if last else wire.frame(data)

    def send_framed(self, framed: bytes) -> None:
        """Bytes already framed by :meth:`frame`."""
        if self.state == _STREAMING:
            if self._held:
                framed, self._held = self._held + framed, b""
            self.conn.write(framed)

    def end(self, data: bytes = b"") -> None:
        """The last piece (optional) and the end of the streamed body."""
        if self.state != _STREAMING:
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
        if self.state == _DONE:
            return
        self.state = _DONE
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


class ServerConnection(asyncio.Protocol):
    """One client connection: llhttp's callbacks, the queue of requests, the writes."""

    def __init__(self, server: HTTPServer) -> None:
        self.server = server
        self.limits = server.limits
        self.transport: asyncio.Transport | None = None
        self.sock: socket.socket | None = None
        self.tag: Any = None
        """The application's per-connection state (set in ``on_connect``)."""
        self.parser = httptools.HttpRequestParser(self)
        self.parsing: Exchange | None = None
        self.current: Exchange | None = None
        """The request being answered."""
        self.queue: deque[Exchange] = deque()
        """Requests parsed, waiting for their turn."""
        self.task: asyncio.Task[None] | None = None
        self.closed = False
        self.now = 0
        self._head_bytes = 0
        self._body_bytes = 0
        self._expect = False
        self._http10: bool | None = None
        self._dispatching = False
        self._paused = False
        self._write_paused = False
        self._drain: asyncio.Future[None] | None = None
        self._idle_since = 0.0
        self._idle_timer: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol -----------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        self.sock = transport.get_extra_info("socket")
        if self.sock is not None:
            try:
                self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except (OSError, AttributeError):
                pass
        srv = self.server
        srv.connections.add(self)
        if srv.on_connect is not None:
            srv.on_connect(self)
        if srv.draining:
            self.close()
        else:
            self._arm_idle()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.transport = None
        self.parser = _CLOSED  # the parser holds this connection's methods: no cycle left
        self.parsing = None
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        gone = [self.current, *self.queue] if self.current is not None else list(self.queue)
        self.current = None
        self.queue.clear()
        for ex in gone:
            if ex.state != _DONE:
                ex.state = _DONE
                cb, ex.on_close = ex.on_close, None
                if cb is not None:
                    try:
                        cb()
                    except Exception:
                        log.exception("on_close callback failed")
        if self.task is not None:
            self.task.cancel()
        if self._drain is not None and not self._drain.done():
            self._drain.set_result(None)
        srv = self.server
        srv.connections.discard(self)
        if srv.on_disconnect is not None:
            srv.on_disconnect(self)
        if srv.draining and not srv.connections and srv._empty is not None:
            srv._empty.set()

    def data_received(self, data: bytes) -> None:
        self.now = time.perf_counter_ns()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._refuse(501, "protocol upgrades are not supported")
        except httptools.HttpParserError as exc:
            self._parse_failed(exc)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._drain is not None and not self._drain.done():
            self._drain.set_result(None)
        self._drain = None

    # -- llhttp callbacks -----------------------------------------------------------------
    def on_message_begin(self) -> None:
        self.parsing = Exchange(self, self.now)
        self._head_bytes = 0
        self._body_bytes = 0
        self._expect = False
        self._idle_since = self.now / 1e9  # a request must arrive within the idle timeout

    def on_url(self, url: bytes) -> None:
        self.parsing.target += url  # type: ignore[union-attr]
        self._head_bytes += len(url)
        if self._head_bytes > self.limits.max_head_bytes:
            raise _Refused(431, f"request head over {self.limits.max_head_bytes} bytes")

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        self.parsing.headers.append((name, value))  # type: ignore[union-attr]
        self._head_bytes += len(name) + len(value)
        if self._head_bytes > self.limits.max_head_bytes:
            raise _Refused(431, f"request head over {self.limits.max_head_bytes} bytes")
        if name == b"expect" and value.lower() == b"100-continue":
            self._expect = True

    def on_headers_complete(self) -> None:
        ex = self.parsing
        assert ex is not None
        p = self.parser
        raw = p.get_method()
        ex.method = _METHODS.get(raw) or raw.decode("ascii", "replace")
        ex.keep_alive = p.should_keep_alive()
        if self._http10 is None:  # a connection does not change versions
            self._http10 = p.get_http_version() == "1.0"
        ex.http10 = self._http10
        target = ex.target
        q = target.find(b"?")
        if q < 0:
            ex.path = target.decode("latin-1")
        else:
            ex.path = target[:q].decode("latin-1")
            ex.query = target[q + 1 :].decode("latin-1")
        if self._expect:
            self.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        ex = self.parsing
        assert ex is not None
        self._body_bytes += len(body)
        if self._body_bytes > self.limits.max_body_bytes:
            raise _Refused(413, f"request body over {self.limits.max_body_bytes} bytes")
        ex._parts.append(body)

    def on_message_complete(self) -> None:
        ex = self.parsing
        assert ex is not None
        self.parsing = None
        parts = ex._parts
        if parts:
            ex.body = parts[0] if len(parts) == 1 else b"".join(parts)
            ex._parts = []
        self.queue.append(ex)
        if len(self.queue) >= self.limits.max_pipelined and not self._paused and self.transport:
            self._paused = True
            self.transport.pause_reading()
        if self.current is None and not self._dispatching:
            self._dispatch()

    # -- answering ------------------------------------------------------------------------
    def _dispatch(self) -> None:
        """Hand the queued requests to the handler, one at a time."""
        self._dispatching = True
        try:
            while self.current is None and self.queue and not self.closed:
                ex = self.current = self.queue.popleft()
                if self._paused and len(self.queue) < self.limits.max_pipelined:
                    self._paused = False
                    if self.transport is not None:
                        self.transport.resume_reading()
                try:
                    result = self.server.handler(ex)
                except Exception:
                    log.exception("handler failed on %s %s", ex.method, ex.path)
                    self._handler_failed(ex)
                    continue
                if result is not None:
                    self.task = asyncio.get_running_loop().create_task(self._run(ex, result))
        finally:
            self._dispatching = False

    async def _run(self, ex: Exchange, work: Awaitable[None]) -> None:
        try:
            await work
        except asyncio.CancelledError:
            if not self.closed and ex.state != _DONE:
                self.abort()
            return
        except Exception:
            log.exception("handler failed on %s %s", ex.method, ex.path)
            self._handler_failed(ex)
        else:
            if ex.state == _NEW:
                ex.error(500, "the handler returned without a response")
            elif ex.state == _STREAMING:
                self.abort()  # an unfinished stream must not look finished
        finally:
            if self.task is asyncio.current_task():
                self.task = None

    def _handler_failed(self, ex: Exchange) -> None:
        if ex.state == _NEW:
            ex.close_after = True
            ex.error(500, "internal server error")
        elif ex.state == _STREAMING:
            self.abort()

    def _finished(self, ex: Exchange, close: bool) -> None:
        """``ex``'s response is complete: close, or go on with the next request."""
        if self.current is ex:
            self.current = None
        if close or (self.server.draining and not self.queue):
            self.close()
            return
        if self.queue:
            if not self._dispatching:
                self._dispatch()
        else:
            self._arm_idle()

    # -- writing --------------------------------------------------------------------------
    def write(self, data: bytes) -> None:
        t = self.transport
        if t is not None:
            t.write(data)

    def writelines(self, parts: tuple[bytes, ...] | list[bytes]) -> None:
        t = self.transport
        if t is not None:
            t.writelines(parts)

    @property
    def buffered(self) -> int:
        """Bytes the transport holds back (0: a write now goes straight to the socket)."""
        t = self.transport
        return t.get_write_buffer_size() if t is not None else 0

    async def drain(self) -> None:
        if not self._write_paused or self.closed:
            return
        if self._drain is None:
            self._drain = asyncio.get_running_loop().create_future()
        await self._drain

    def close(self) -> None:
        """Close once the queued bytes are out."""
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def busy(self) -> bool:
        """Is a request being answered or waiting to be?"""
        return self.current is not None or bool(self.queue)

    @property
    def peer(self) -> Any:
        """The client's address (``(host, port)`` for TCP)."""
        t = self.transport
        return t.get_extra_info("peername") if t is not None else None

    # -- refusals and time-outs -----------------------------------------------------------
    def _parse_failed(self, exc: httptools.HttpParserError) -> None:
        cause = exc.__context__
        if isinstance(cause, _Refused):
            self._refuse(cause.status, cause.message)
        else:
            self._refuse(400, f"malformed HTTP request: {exc}")

    def _refuse(self, status: int, message: str) -> None:
        """Answer a request that cannot be parsed, then close (after what is in flight)."""
        self.parsing = None
        if self.transport is not None:
            self.transport.pause_reading()
        if self.current is None and not self.queue:
            body = self.server.error_body(status, message)
            self.write(wire.head(status, wire.JSON, len(body), close=True) + body)
            self.close()
        else:  # answers are in flight: finish them, then close
            last = self.queue[-1] if self.queue else self.current
            assert last is not None
            last.close_after = True

    def _arm_idle(self) -> None:
        """Start the idle clock: closed if no request (or no whole one) comes in time.
        One timer per connection, re-armed only when it fires."""
        timeout = self.limits.keepalive_timeout_s
        if timeout is None or self.closed:
            return
        self._idle_since = time.perf_counter()
        if self._idle_timer is None:
            self._idle_timer = asyncio.get_running_loop().call_later(timeout, self._idle_check)

    def _idle_check(self) -> None:
        self._idle_timer = None
        timeout = self.limits.keepalive_timeout_s
        if self.closed or timeout is None or self.busy():
            return  # re-armed when it is idle again
        left = self._idle_since + timeout - time.perf_counter()
        if left <= 0:
            self.close()
        else:
            self._idle_timer = asyncio.get_running_loop().call_later(left, self._idle_check)


class _Closed:
    """Stands in for the parser of a closed connection (bytes after the close are dropped)."""

    def feed_data(self, data: bytes) -> None:
        pass


_CLOSED: Any = _Closed()


class _Refused(Exception):
    """Raised inside an llhttp callback to refuse a request (413, 431)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class HTTPServer:
    """Serves ``handler`` on a TCP port (see the module docstring)."""

    def __init__(
        self,
        handler: Handler,
        limits: Limits | None = None,
        error_body: Callable[[int, str, str | None], bytes] | None = None,
        on_connect: Callable[[ServerConnection], None] | None = None,
        on_disconnect: Callable[[ServerConnection], None] | None = None,
    ) -> None:
        self.handler = handler
        self.limits = limits or Limits()
        self._error_body = error_body or wire.openai_error
        self.on_connect = on_connect
        self.on_disconnect = on_disconnect
        self.connections: set[ServerConnection] = set()
        self.draining = False
        self.port = 0
        self._server: asyncio.base_events.Server | None = None
        self._empty: asyncio.Event | None = None

    def error_body(self, status: int, message: str, type_: str | None = None) -> bytes:
        return self._error_body(status, message, type_)

    async def start(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        sock: socket.socket | None = None,
        backlog: int = 4096,
        ssl_context: ssl.SSLContext | None = None,
    ) -> int:
        """Listen (on ``host:port``, or on an already bound ``sock``); the port."""
        loop = asyncio.get_running_loop()
        if sock is not None:
            self._server = await loop.create_server(
                lambda: ServerConnection(self), sock=sock, backlog=backlog, ssl=ssl_context
            )
        else:
            self._server = await loop.create_server(
                lambda: ServerConnection(self),
                host,
                port,
                backlog=backlog,
                reuse_address=True,
                ssl=ssl_context,
            )
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def drain(self, timeout_s: float = 30.0) -> bool:
        """Stop accepting; close idle connections now and busy ones once their queued
        requests are answered (``Connection: close`` on responses begun from now on); after
        ``timeout_s`` abort what is left. True when everything finished in time."""
        self.draining = True
        if self._server is not None:
            self._server.close()
        self._empty = asyncio.Event()
        for c in list(self.connections):
            if not c.busy():
                c.close()
            elif c.transport is not None:
                c.transport.pause_reading()
        clean = True
        if self.connections:
            try:
                await asyncio.wait_for(self._empty.wait(), timeout_s)
            except TimeoutError:
                clean = False
        for c in list(self.connections):
            c.abort()
        if self.connections:
            await asyncio.sleep(0)  # let connection_lost run
        return clean

    async def close(self) -> None:
        """Stop now: abort every connection."""
        await self.drain(0.0)
