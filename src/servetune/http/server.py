"""The server: listens, accepts connections, and shuts down cleanly.

See :mod:`servetune.http` for the API as a whole. In short::

    server = HTTPServer(handler)            # handler(ex) -> None, or a coroutine
    port = await server.start("127.0.0.1", 0)
    ...
    await server.drain(timeout_s=30)        # stop accepting, finish what is in flight

Each accepted connection is a :class:`~servetune.http.connection.ServerConnection`, which
parses its requests into :class:`~servetune.http.exchange.Exchange` objects and hands them to
``handler``.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Callable

from servetune.http import wire
from servetune.http.connection import Limits, ServerConnection
from servetune.http.exchange import Handler


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

    def connection_opened(self, conn: ServerConnection) -> None:
        """``conn`` was accepted (called by the connection)."""
        self.connections.add(conn)
        if self.on_connect is not None:
            self.on_connect(conn)

    def connection_closed(self, conn: ServerConnection) -> None:
        """``conn`` is gone (called by the connection, last thing)."""
        self.connections.discard(conn)
        if self.on_disconnect is not None:
            self.on_disconnect(conn)
        if self.draining and not self.connections and self._empty is not None:
            self._empty.set()

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
