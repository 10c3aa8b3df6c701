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
import math
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any

from servetune.http import wire
from servetune.http.connection import Limits, ServerConnection
from servetune.http.exchange import Handler

EVICT_AFTER_S = 1.0
"""Over its own cap, a client's connection is closed for its next one only once it has waited
this long: one that just connected is about to send its request (a burst of new connections is
refused with 429 rather than made to close each other before any sends)."""


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
        self.by_client: dict[Any, set[ServerConnection]] = {}
        """Open connections per client address."""
        self.evicted = 0
        self.refused = 0
        self.lingering = 0
        """Refused connections still open for their client to read the refusal."""
        """Connections closed to make room at a cap / refused at one (no room to make)."""
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

    def connection_opened(self, conn: ServerConnection) -> tuple[int, str] | None:
        """``conn`` was accepted (called by the connection); None: admitted, else the
        (status, message) to refuse it with.

        At a cap a connection that waits for its client (idle, or still sending its request;
        never one being answered) may be closed to make room. Over
        ``max_connections_per_client``: the client's own that has waited longest, once it has
        waited :data:`EVICT_AFTER_S`. Over ``max_connections``: the one that has waited longest
        among the addresses holding the most connections, and only if they hold at least two
        more than the newcomer's address — max-min fair by address: an address flooding slow
        connections cannot take the place of one holding few, nor churn the cap by closing
        its own, while a client holding few still gets in. When no such connection exists the
        new one is refused: 429 with ``Retry-After``, the message naming the cap, as for any
        overload a client may retry."""
        lim = self.limits
        peer = conn.peer
        client = peer[0] if isinstance(peer, tuple) else peer
        conn.client = client
        mine = self.by_client.get(client)
        held = len(mine) if mine is not None else 0
        per = lim.max_connections_per_client
        if per is not None and held >= per:
            assert mine is not None
            if not self._evict_from(mine):
                self.refused += 1
                return 429, f"too many open connections from {client} (limit {per})"
            held -= 1
        cap = lim.max_connections
        if cap is not None and len(self.connections) >= cap and not self._make_room(held):
            self.refused += 1
            return 429, f"the server is at its limit of {cap} open connections; retry shortly"
        self.by_client.setdefault(client, set()).add(conn)
        self.connections.add(conn)
        if self.on_connect is not None:
            self.on_connect(conn)
        return None

    def _make_room(self, held: int) -> bool:
        """At the server's cap, for a newcomer from an address holding ``held``: close the
        longest-waiting connection of the addresses that hold the most connections — at least
        two more than the newcomer's, so that the swap leaves them still holding more; False
        when there is none waiting. Runs only at the cap."""
        levels: dict[int, list[set[ServerConnection]]] = {}
        for conns in self.by_client.values():
            if len(conns) >= held + 2:
                levels.setdefault(len(conns), []).append(conns)
        for n in sorted(levels, reverse=True):
            best: ServerConnection | None = None
            since = math.inf
            for conns in levels[n]:
                for c in conns:
                    w = c.waiting_since()
                    if w < since:
                        best, since = c, w
            if best is not None:
                self._evict(best)
                return True
        return False

    def _evict_from(self, among: set[ServerConnection]) -> bool:
        """Close the longest-waiting connection of ``among``; False when all are answered."""
        before = time.perf_counter() - EVICT_AFTER_S
        victim = min(among, key=lambda c: c.waiting_since(before), default=None)
        if victim is None or victim.waiting_since(before) == math.inf:
            return False
        self._evict(victim)
        return True

    def _evict(self, victim: ServerConnection) -> None:
        self._forget(victim)
        victim.evict()
        self.evicted += 1

    def _forget(self, conn: ServerConnection) -> bool:
        """No longer count ``conn`` (closed, or closing to make room); False if it was not."""
        if conn not in self.connections:
            return False
        self.connections.discard(conn)
        mine = self.by_client.get(conn.client)
        if mine is not None:
            mine.discard(conn)
            if not mine:
                del self.by_client[conn.client]
        return True

    def connection_closed(self, conn: ServerConnection) -> None:
        """``conn`` is gone (called by the connection, last thing)."""
        counted = self._forget(conn)
        evicted = conn.evicted
        if (counted or evicted) and self.on_disconnect is not None:
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
