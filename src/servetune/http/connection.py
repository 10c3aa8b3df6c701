"""One client connection (an ``asyncio.Protocol``): its requests parsed, queued and answered.

A connection parses every byte as it arrives (llhttp, in C; the Python callbacks only collect
the URL, the headers and the body, and refuse a head or body over its :class:`Limits`). Requests
are answered one at a time and in order (HTTP/1.1 has no other way): a request parsed while
another is being answered waits in the connection's queue, and reading pauses when
:attr:`Limits.max_pipelined` are waiting. Each request is an
:class:`~servetune.http.exchange.Exchange` handed to the server's handler: a plain function may
leave the response open and finish it later from anywhere on the loop (the simulated engine
does); a coroutine runs as a task that must have finished its response when it returns, and is
cancelled when the client goes away. Either way :attr:`Exchange.on_close` is called if the
connection is lost before the response is complete. An idle keep-alive connection is closed
after :attr:`Limits.keepalive_timeout_s`.
"""

from __future__ import annotations

import asyncio
import logging
import math
import socket
import time
from collections import deque
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, Protocol

import httptools

from servetune.http import wire
from servetune.http.exchange import DONE, NEW, STREAMING, Exchange, Handler, Server

log = logging.getLogger("servetune.http")

_METHODS = {m.encode(): m for m in ("GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH")}


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
    header_timeout_s: float | None = None
    """A request's head (request line and headers) must be in within this long of its first
    byte, and a new connection's first request must begin within it (408 and closed beyond;
    None: only the keep-alive clock)."""
    body_timeout_s: float | None = None
    """A request's whole body must be in within this long of the end of its head (408 and
    closed beyond; None: no deadline)."""
    max_connections: int | None = None
    """Open client connections, all addresses (see :class:`~servetune.http.server.HTTPServer`:
    the oldest waiting one is closed to make room, else the new one is refused with 429)."""
    max_connections_per_client: int | None = None
    """Open connections from one client address (the same, with 429)."""


LINGER_S = 1.0
"""How long a refused connection stays open, reading and dropping, for its client to read
the refusal."""
MAX_LINGERING = 32
"""Refused connections lingering at once (within the descriptors kept aside by
:data:`servetune.http.descriptors.RESERVE`)."""


class Host(Server, Protocol):
    """What a connection asks of its server (an :class:`~servetune.http.server.HTTPServer`)."""

    lingering: int

    @property
    def handler(self) -> Handler: ...
    @property
    def limits(self) -> Limits: ...
    def connection_opened(self, conn: ServerConnection) -> tuple[int, str] | None: ...
    def connection_closed(self, conn: ServerConnection) -> None: ...


class ServerConnection(asyncio.Protocol):
    """One client connection: llhttp's callbacks, the queue of requests, the writes."""

    def __init__(self, server: Host) -> None:
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
        """When the connection's current wait began (perf_counter s): idle since its last
        answer, or since its current request's first byte (the oldest is evicted first)."""
        self._idle_timer: asyncio.TimerHandle | None = None
        self._begun = False
        """A request has begun on this connection (the first must within the head deadline)."""
        self._begin_ns = 0
        self._head_done_ns = 0
        """When the current request began / its head ended (0: still in its head)."""
        self._read_timer: asyncio.TimerHandle | None = None
        self.client: Any = None
        """The client's address as the server counts it (``peername``'s host)."""
        self.evicted = False
        """Closed by the server to make room at a connection cap."""
        self._lingering = False

    # -- asyncio.Protocol -----------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        self.sock = transport.get_extra_info("socket")
        if self.sock is not None:
            try:
                self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except (OSError, AttributeError):
                pass
        refusal = self.server.connection_opened(self)
        if refusal is not None:  # over a connection cap: answered and closed, never parsed
            self._refuse_connection(*refusal)
        elif self.server.draining:
            self.close()
        else:
            self._arm_idle()

    def _refuse_connection(self, status: int, message: str) -> None:
        """Answer ``status`` at once and close. The client is likely sending its request as
        this goes out: closed at once, the kernel would answer those bytes with a reset that
        can destroy the refusal before it is read, so the connection lingers — its writing side
        shut, what comes in dropped — until the client closes or :data:`LINGER_S` passes, for
        at most :data:`MAX_LINGERING` connections at a time (descriptors are what a flood
        exhausts; beyond that it is closed at once)."""
        self.parser = _CLOSED
        body = self.server.error_body(status, message)
        extra = ((b"Retry-After", b"1"),)
        self.write(wire.head(status, wire.JSON, len(body), extra, close=True) + body)
        t = self.transport
        if t is None:
            return
        if self.server.lingering < MAX_LINGERING and t.can_write_eof():
            self.server.lingering += 1
            self._lingering = True
            t.write_eof()
            self._idle_timer = asyncio.get_running_loop().call_later(LINGER_S, self.abort)
        else:
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._lingering:
            self._lingering = False
            self.server.lingering -= 1
        self.closed = True
        self.transport = None
        self.parser = _CLOSED  # the parser holds this connection's methods: no cycle left
        self.parsing = None
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None
        gone = [self.current, *self.queue] if self.current is not None else list(self.queue)
        self.current = None
        self.queue.clear()
        for ex in gone:
            if ex.state != DONE:
                ex.state = DONE
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
        self.server.connection_closed(self)

    def data_received(self, data: bytes) -> None:
        self.now = time.perf_counter_ns()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._refuse(501, "protocol upgrades are not supported")
        except httptools.HttpParserError as exc:
            self._parse_failed(exc)
        else:
            if self.parsing is not None and self._read_timer is None:
                self._arm_read()  # a request left partial: its head or body deadline runs

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
        self._begun = True
        self._begin_ns = self.now
        self._head_done_ns = 0
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
        elif (
            name == b"content-length"
            and value.isdigit()
            and int(value) > self.limits.max_body_bytes
        ):  # refused at the head, before the body is read (or asked for with 100 Continue)
            raise _Refused(413, f"request body over {self.limits.max_body_bytes} bytes")

    def on_headers_complete(self) -> None:
        ex = self.parsing
        assert ex is not None
        p = self.parser
        raw = p.get_method()
        self._head_done_ns = self.now
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
            if not self.closed and ex.state != DONE:
                self.abort()
            return
        except Exception:
            log.exception("handler failed on %s %s", ex.method, ex.path)
            self._handler_failed(ex)
        else:
            if ex.state == NEW:
                t = self.transport
                if t is None or t.is_closing():
                    return  # the handler cut the connection (ex.abort): nothing to answer
                ex.error(500, "the handler returned without a response")
            elif ex.state == STREAMING:
                self.abort()  # an unfinished stream must not look finished
        finally:
            if self.task is asyncio.current_task():
                self.task = None

    def _handler_failed(self, ex: Exchange) -> None:
        if ex.state == NEW:
            ex.close_after = True
            ex.error(500, "internal server error")
        elif ex.state == STREAMING:
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

    def _idle_timeout(self) -> float | None:
        """How long the connection may wait for its next request: the keep-alive time-out,
        or for a new connection's first request the head deadline when it is shorter."""
        lim = self.limits
        timeout = lim.keepalive_timeout_s
        if not self._begun and lim.header_timeout_s is not None:
            return lim.header_timeout_s if timeout is None else min(timeout, lim.header_timeout_s)
        return timeout

    def _arm_idle(self) -> None:
        """Start the idle clock: closed if no request (or no whole one) comes in time.
        One timer per connection, re-armed only when it fires."""
        timeout = self._idle_timeout()
        if timeout is None or self.closed:
            return
        self._idle_since = time.perf_counter()
        if self._idle_timer is None:
            self._idle_timer = asyncio.get_running_loop().call_later(timeout, self._idle_check)

    def _idle_check(self) -> None:
        self._idle_timer = None
        timeout = self._idle_timeout()
        if self.closed or timeout is None or self.busy():
            return  # re-armed when it is idle again
        if self.parsing is not None and self._read_timer is not None:
            return  # a request is being read: its own deadline watches it
        left = self._idle_since + timeout - time.perf_counter()
        if left <= 0:
            self.close()
        else:
            self._idle_timer = asyncio.get_running_loop().call_later(left, self._idle_check)

    def _read_deadline_ns(self) -> int | None:
        """When the request being read must be in (its head, or its body), or None."""
        lim = self.limits
        if self._head_done_ns == 0:
            t = lim.header_timeout_s
            return None if t is None else self._begin_ns + int(t * 1e9)
        t = lim.body_timeout_s
        return None if t is None else self._head_done_ns + int(t * 1e9)

    def _arm_read(self) -> None:
        """A request is left partial after a read: watch its deadline (one timer, armed
        only on this path — a request that arrives in one read never gets one)."""
        due = self._read_deadline_ns()
        if due is None or self.closed:
            return
        left = max(0.0, (due - time.perf_counter_ns()) / 1e9)
        self._read_timer = asyncio.get_running_loop().call_later(left, self._read_check)

    def _read_check(self) -> None:
        self._read_timer = None
        if self.closed or self.parsing is None:
            return  # the request came in whole
        due = self._read_deadline_ns()
        if due is None:
            return
        now = time.perf_counter_ns()
        if self._paused:  # reading is paused by us (the pipeline is full), not the client
            self._read_timer = asyncio.get_running_loop().call_later(1.0, self._read_check)
            return
        if now < due:
            self._read_timer = asyncio.get_running_loop().call_later(
                (due - now) / 1e9, self._read_check
            )
            return
        lim = self.limits
        if self._head_done_ns == 0:
            self._refuse(408, f"request head not received within {lim.header_timeout_s:g} s")
        else:
            self._refuse(408, f"request body not received within {lim.body_timeout_s:g} s")

    def waiting_since(self, before: float = math.inf) -> float:
        """When this connection began to wait for its client (perf_counter s) if that is
        before ``before``, else ``inf`` — as for a connection being answered: what the server
        evicts first at its cap."""
        t = self.transport
        if t is None or t.is_closing() or self.current is not None or self.queue:
            return math.inf
        since = self._idle_since
        return since if since < before else math.inf

    def evict(self) -> None:
        """Closed to make room for a new connection (the server is at its cap): a request
        still being read gets a 408 first; an idle keep-alive connection is just closed."""
        self.evicted = True
        if self.parsing is not None:
            self._refuse(408, "closed to make room: the server is at its connection limit")
        else:
            self.close()


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
