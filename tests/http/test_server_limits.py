"""Connection and slow-client limits of servetune.http's server: head and body deadlines,
caps on open connections (all clients, one client address) that make room by closing the
connection that has waited longest, a clear refusal when no room can be made, and the cap
fitted to the descriptor limit. Before, nothing cut a slow head or body but the 75 s
keep-alive clock, and nothing capped connections."""

from __future__ import annotations

import asyncio
import resource
import time
from typing import Any

import orjson
import pytest

from servetune.http import Exchange, HTTPServer, Limits, Router
from servetune.http.descriptors import fit_connections


def _router() -> Router:
    async def slow(ex: Exchange) -> None:
        await asyncio.sleep(3.0)
        ex.respond_json(200, {"ok": True})

    r = Router()
    r.get("/ok", lambda ex: ex.respond_json(200, {"ok": True}))
    r.post("/echo", lambda ex: ex.respond(200, ex.body, b"application/octet-stream"))
    r.get("/slow", slow)
    return r


def run(limits: Limits, go: Any) -> Any:
    async def main() -> Any:
        server = HTTPServer(_router(), limits=limits)
        await server.start("127.0.0.1", 0)
        try:
            return await asyncio.wait_for(go(server), 30)
        finally:
            await server.drain(1.0)

    return asyncio.run(main())


async def read_all(r: asyncio.StreamReader, wait: float = 10.0) -> bytes:
    return await asyncio.wait_for(r.read(), wait)


async def get_ok(port: int, host: str = "127.0.0.1") -> bytes:
    r, w = await asyncio.open_connection("127.0.0.1", port, local_addr=(host, 0))
    w.write(b"GET /ok HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    try:
        return await read_all(r)
    finally:
        w.close()


def test_a_head_that_stops_is_cut_at_the_head_deadline() -> None:
    async def go(server: HTTPServer) -> tuple[bytes, float]:
        r, w = await asyncio.open_connection("127.0.0.1", server.port)
        t0 = time.monotonic()
        w.write(b"GET /ok HTTP/1.1\r\nHost: x\r\n")  # the request line, then nothing
        out = await read_all(r)
        return out, time.monotonic() - t0

    out, took = run(Limits(header_timeout_s=0.5), go)
    assert out.startswith(b"HTTP/1.1 408 "), out
    assert b"request head not received within 0.5 s" in out
    assert 0.4 < took < 5.0, took


def test_a_body_that_trickles_is_cut_at_the_body_deadline() -> None:
    async def go(server: HTTPServer) -> tuple[bytes, float]:
        r, w = await asyncio.open_connection("127.0.0.1", server.port)
        w.write(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
        t0 = time.monotonic()
        out = b""

        async def trickle() -> None:
            for _ in range(100):
                w.write(b"x")  # a byte every 0.1 s: each read resets no clock
                await asyncio.sleep(0.1)

        t = asyncio.create_task(trickle())
        try:
            out = await read_all(r)
        finally:
            t.cancel()
        return out, time.monotonic() - t0

    out, took = run(Limits(header_timeout_s=5.0, body_timeout_s=0.6), go)
    assert out.startswith(b"HTTP/1.1 408 "), out
    assert b"body not received within 0.6 s" in out
    assert 0.5 < took < 5.0, took


def test_a_connection_that_sends_nothing_is_closed_at_the_head_deadline() -> None:
    async def go(server: HTTPServer) -> float:
        r, w = await asyncio.open_connection("127.0.0.1", server.port)
        t0 = time.monotonic()
        assert await read_all(r) == b""
        w.close()
        return time.monotonic() - t0

    took = run(Limits(header_timeout_s=0.5, keepalive_timeout_s=75), go)
    assert 0.4 < took < 5.0, took


def test_deadlines_do_not_cut_requests_that_come_whole_or_keep_alive() -> None:
    async def go(server: HTTPServer) -> list[bytes]:
        r, w = await asyncio.open_connection("127.0.0.1", server.port)
        outs = []
        for _ in range(3):  # idle between requests longer than the head deadline: allowed
            w.write(b"GET /ok HTTP/1.1\r\nHost: x\r\n\r\n")
            outs.append(await asyncio.wait_for(r.readuntil(b'{"ok":true}'), 5))
            await asyncio.sleep(0.5)
        w.close()
        return outs

    outs = run(Limits(header_timeout_s=0.3, body_timeout_s=0.3, keepalive_timeout_s=10), go)
    assert all(o.startswith(b"HTTP/1.1 200 ") for o in outs)


def test_at_the_cap_the_longest_waiting_connection_makes_room() -> None:
    async def go(server: HTTPServer) -> tuple[list[bytes], bytes, int]:
        slow = []
        for _ in range(5):  # the cap's worth of connections that never finish their head
            r, w = await asyncio.open_connection(
                "127.0.0.1", server.port, local_addr=("127.0.0.2", 0)
            )
            w.write(b"GET /ok HTTP/1.1\r\n")
            await w.drain()
            slow.append((r, w))
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.1)
        assert len(server.connections) == 5
        # the flooding address cannot make room for itself (it holds the most already)
        own = await get_ok(server.port, "127.0.0.2")
        ok = await get_ok(server.port)  # a client holding none: admitted, served
        first = await read_all(slow[0][0])  # the oldest slow one was told and closed
        for _r, w in slow:
            w.close()
        return [first, own], ok, server.evicted

    (first, own), ok, evicted = run(Limits(max_connections=5, header_timeout_s=30), go)
    assert ok.startswith(b"HTTP/1.1 200 "), ok
    assert first.startswith(b"HTTP/1.1 408 ") and b"connection limit" in first, first
    assert own.startswith(b"HTTP/1.1 429 ") and b"limit of 5 open connections" in own, own
    assert evicted == 1


def test_at_the_cap_with_every_connection_busy_the_new_one_is_refused_clearly() -> None:
    async def go(server: HTTPServer) -> tuple[bytes, list[bytes]]:
        busy = []
        for _ in range(3):
            r, w = await asyncio.open_connection("127.0.0.1", server.port)
            w.write(b"GET /slow HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            busy.append((r, w))
        await asyncio.sleep(0.3)
        refused = await get_ok(server.port)
        done = [await read_all(r) for r, _w in busy]
        for _r, w in busy:
            w.close()
        return refused, done

    refused, done = run(Limits(max_connections=3), go)
    assert refused.startswith(b"HTTP/1.1 429 "), refused
    assert b"Retry-After: 1" in refused
    body = orjson.loads(refused.split(b"\r\n\r\n", 1)[1])
    assert "limit of 3 open connections" in body["error"]["message"]
    assert all(d.startswith(b"HTTP/1.1 200 ") for d in done)  # the busy ones were not cut


def test_one_client_address_is_capped_others_are_not() -> None:
    async def go(server: HTTPServer) -> tuple[bytes, bytes]:
        busy = []
        for _ in range(2):  # 127.0.0.2's cap, both busy
            r, w = await asyncio.open_connection(
                "127.0.0.1", server.port, local_addr=("127.0.0.2", 0)
            )
            w.write(b"GET /slow HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            busy.append((r, w))
        await asyncio.sleep(0.3)
        third = await get_ok(server.port, "127.0.0.2")
        other = await get_ok(server.port, "127.0.0.1")
        for r, w in busy:
            await read_all(r)
            w.close()
        return third, other

    third, other = run(Limits(max_connections_per_client=2), go)
    assert third.startswith(b"HTTP/1.1 429 ") and b"127.0.0.2" in third, third
    assert other.startswith(b"HTTP/1.1 200 "), other


def test_the_cap_fits_the_descriptor_limit() -> None:
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        pytest.skip("no descriptor limit to fit")
    fit = fit_connections(10, per_connection=2)
    assert fit == 10
    huge = fit_connections(10**9, per_connection=2)  # more than any limit: lowered to fit
    now_soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert huge == (now_soft - 64) // 2 and huge < 10**9
    assert now_soft >= soft  # raised towards the hard limit, never lowered
