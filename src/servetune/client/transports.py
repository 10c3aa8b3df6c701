"""Transports: how request bytes reach the server, behind one small interface.

``fast`` (default): :mod:`servetune.client.fasthttp`, lean HTTP/1.1 on asyncio Protocols,
arrivals stamped by the kernel where it can.
``aiohttp``: the general-purpose client, a cross-check of ``fast``; arrivals stamped when its
reader wakes up. Neither uses an HTTP proxy (the environment's is not read) nor follows a
redirect.
Both stream the 2xx body to a sink as ``(bytes, arrival_ns)`` and return the status and,
for errors, the first bytes of the body.
"""

from __future__ import annotations

import time
from typing import Literal, Protocol

import aiohttp

from servetune.client.fasthttp import HTTPError, Pool, Sink, build_request

TransportName = Literal["fast", "aiohttp"]

# Long contexts stream long lines and big usage blocks; aiohttp's 64 KiB default read buffer
# throttles them (vLLM #39963). It reads raw chunks (no line limit) into a 4 MiB buffer.
READ_BUFSIZE = 4 * 1024 * 1024


class Transport(Protocol):
    def prepare(self, path: str, body: bytes, headers: bytes = b"") -> object:
        """Whatever ``send`` needs, built once per request; ``headers``: extra header lines,
        each ``Name: value\r\n``."""
        ...

    async def send(self, prepared: object, sink: Sink) -> tuple[int, bytes]: ...

    async def close(self) -> None: ...

    def stamp_counts(self) -> tuple[int, int]:
        """(reads stamped by the kernel, reads stamped in user space) so far."""
        ...


class FastTransport:
    def __init__(self, base_url: str, api_key: str | None) -> None:
        self.pool = Pool(base_url)
        self.api_key = api_key

    def prepare(self, path: str, body: bytes, headers: bytes = b"") -> object:
        return build_request(self.pool, path, body, self.api_key, headers)

    async def send(self, prepared: object, sink: Sink) -> tuple[int, bytes]:
        assert isinstance(prepared, bytes)
        resp = await self.pool.request(prepared, sink)
        return resp.status, bytes(resp.body)

    async def close(self) -> None:
        self.pool.close()

    def stamp_counts(self) -> tuple[int, int]:
        return self.pool.kernel_reads, self.pool.user_reads


def make_session(
    api_key: str | None = None, limit: int = 0, timeout_s: float | None = None
) -> aiohttp.ClientSession:
    # identity: aiohttp would ask for "gzip, deflate" by default, and it does not decode
    # (auto_decompress=False keeps the bytes as they arrived, for their stamps)
    headers = {"Content-Type": "application/json", "Accept-Encoding": "identity"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    connector = aiohttp.TCPConnector(limit=limit, ttl_dns_cache=300)
    return aiohttp.ClientSession(
        connector=connector,
        headers=headers,
        timeout=aiohttp.ClientTimeout(total=timeout_s),
        read_bufsize=READ_BUFSIZE,
        auto_decompress=False,
    )


class AiohttpTransport:
    def __init__(self, base_url: str, api_key: str | None) -> None:
        self.base = base_url.rstrip("/")
        self.session = make_session(api_key)
        self.reads = 0

    def prepare(self, path: str, body: bytes, headers: bytes = b"") -> object:
        extra: dict[str, str] = {}
        for line in headers.decode("latin-1").split("\r\n"):
            name, sep, value = line.partition(":")
            if sep:
                extra[name.strip()] = value.strip()
        return (self.base + path, body, extra or None)

    async def send(self, prepared: object, sink: Sink) -> tuple[int, bytes]:
        assert isinstance(prepared, tuple)
        url: str = prepared[0]
        body: bytes = prepared[1]
        headers: dict[str, str] | None = prepared[2]
        clock = time.perf_counter_ns
        # A redirect is not followed (a failed request, protocol_error, as the fast client
        # says it): following it would hide a wrong --base-url and add its round trip to TTFT.
        try:
            resp = await self.session.post(url, data=body, allow_redirects=False, headers=headers)
        except aiohttp.ServerDisconnectedError:
            # A kept-alive connection closed by the server as we reused it: the request was
            # never seen (no response byte), so it goes once more on a fresh connection.
            resp = await self.session.post(url, data=body, allow_redirects=False, headers=headers)
        async with resp:
            if resp.status >= 300:
                return resp.status, await resp.content.read(4096)
            content = resp.content
            while True:
                data = await content.readany()
                if not data:
                    break
                self.reads += 1
                sink(data, clock())
            return resp.status, b""

    async def close(self) -> None:
        await self.session.close()

    def stamp_counts(self) -> tuple[int, int]:
        return 0, self.reads


def make_transport(name: TransportName, base_url: str, api_key: str | None) -> Transport:
    if name == "aiohttp":
        return AiohttpTransport(base_url, api_key)
    return FastTransport(base_url, api_key)


__all__ = ["HTTPError", "Transport", "TransportName", "make_session", "make_transport"]
