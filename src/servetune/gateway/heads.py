"""The bytes that frame each forwarded request and each streamed answer, built once.

Every request to one upstream for one path has the same head up to its ``Content-Length``
value (the group's ``api_key`` included), and every stream from one group is answered with the
same headers: both are built on first use and kept until the configuration changes (a reload
builds a new :class:`Heads`).
"""

from __future__ import annotations

from servetune.gateway.config import GatewayConfig
from servetune.gateway.pool import Upstream

_STREAM_HEADERS = [(b"Cache-Control", b"no-cache"), (b"X-Accel-Buffering", b"no")]


class Heads:
    __slots__ = ("_api_keys", "_groups", "_requests")

    def __init__(self, cfg: GatewayConfig) -> None:
        self._api_keys: dict[str, str | None] = {}
        for g in cfg.groups:  # the first group of a name (as the configuration is read)
            self._api_keys.setdefault(g.name, g.api_key)
        self._requests: dict[tuple[Upstream, str], bytes] = {}
        self._groups: dict[str, list[tuple[bytes, bytes]]] = {}

    def request(self, u: Upstream, path: str, payload: bytes) -> bytes:
        """The whole request to ``u`` for ``path`` with ``payload`` as its body."""
        head = self._requests.get((u, path))
        if head is None:
            head = self._requests[(u, path)] = self._request_head(u, path)
        return b"%s%d\r\n\r\n%s" % (head, len(payload), payload)

    def _request_head(self, u: Upstream, path: str) -> bytes:
        """The request head to ``u`` for ``path`` up to the Content-Length value."""
        head = (
            b"POST %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
            b"Accept: application/json, text/event-stream\r\n"
            % ((u.prefix + path).encode(), u.host.encode(), u.port)
        )
        key = self._api_keys.get(u.group)
        if key:
            head += b"Authorization: Bearer %s\r\n" % key.encode()
        return head + b"Content-Length: "

    def stream(self, group: str) -> list[tuple[bytes, bytes]]:
        """The headers a stream from ``group`` is answered with."""
        h = self._groups.get(group)
        if h is None:
            h = [*_STREAM_HEADERS, (b"x-servetune-group", group.encode())]
            self._groups[group] = h
        return h
