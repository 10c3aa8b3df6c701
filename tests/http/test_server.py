"""The server side of servetune.http, over real loopback sockets."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import orjson
import pytest

from servetune.http import Exchange, HTTPServer, Limits, Router
from servetune.http.wire import vllm_error

Go = Callable[[HTTPServer], Awaitable[Any]]
LOOP = {"kind": "asyncio"}


@pytest.fixture(autouse=True, params=["asyncio", "uvloop"])
def loop_kind(request: pytest.FixtureRequest) -> None:
    """Every test on both loops: the servers run on uvloop, tests and tools on asyncio."""
    LOOP["kind"] = request.param


def arun(coro: Awaitable[Any]) -> Any:
    if LOOP["kind"] == "uvloop":
        import uvloop

        return uvloop.run(coro)  # type: ignore[arg-type]
    return asyncio.run(coro)  # type: ignore[arg-type]


def run(handler: Any, go: Go, **kw: Any) -> Any:
    async def main() -> Any:
        server = HTTPServer(handler, **kw)
        await server.start("127.0.0.1", 0)
        try:
            return await asyncio.wait_for(go(server), 20)
        finally:
            await server.drain(1.0)

    return arun(main())


async def raw(port: int, data: bytes, until_close: bool = True, wait: float = 5.0) -> bytes:
    """Send ``data`` on a fresh connection; everything read until the server closes."""
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(data)
    await w.drain()
    out = b""
    try:
        if until_close:
            out = await asyncio.wait_for(r.read(), wait)
        else:
            out = await asyncio.wait_for(r.read(65536), wait)
    finally:
        w.close()
    return out


def get(path: str, extra: bytes = b"") -> bytes:
    return b"GET " + path.encode() + b" HTTP/1.1\r\nHost: x\r\n" + extra + b"\r\n"


def post(path: str, body: bytes, extra: bytes = b"") -> bytes:
    return b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n%s\r\n%s" % (
        path.encode(),
        len(body),
        extra,
        body,
    )


def echo_router() -> Router:
    router = Router()

    def hello(ex: Exchange) -> None:
        ex.respond(200, b"hello " + ex.query.encode(), b"text/plain")

    def echo(ex: Exchange) -> None:
        ex.respond_json(
            200, {"len": len(ex.body), "ct": (ex.header(b"content-type") or b"").decode()}
        )

    async def stream(ex: Exchange) -> None:
        n = int(ex.query or "3")
        ex.start(200)
        for i in range(n):
            ex.send(b"data: %d\n\n" % i)
            await asyncio.sleep(0.001)
        ex.end(b"data: [DONE]\n\n")

    router.get("/hello", hello)
    router.post("/echo", echo)
    router.get("/stream", stream)
    return router


def test_keep_alive_requests_in_order_on_one_connection() -> None:
    async def go(server: HTTPServer) -> bytes:
        # Three requests in one write (pipelined); the streamed one in the middle.
        return await raw(
            server.port,
            get("/hello?a") + get("/stream?2") + get("/hello?b", b"Connection: close\r\n"),
        )

    out = run(echo_router(), go)
    first = out.index(b"hello a")
    chunk = out.index(b"data: 1")
    last = out.index(b"hello b")
    assert first < chunk < last
    assert out.count(b"HTTP/1.1 200 OK") == 3
    assert b"Transfer-Encoding: chunked" in out and out.count(b"0\r\n\r\n") == 1
    assert out.rstrip().endswith(b"hello b")  # then the server closed (read() returned)


def test_streamed_and_whole_responses_read_by_another_client() -> None:
    async def go(server: HTTPServer) -> list[Any]:
        base = f"http://127.0.0.1:{server.port}"
        async with aiohttp.ClientSession() as s:
            async with s.get(base + "/stream?50") as r:
                streamed = await r.read()
            async with s.post(base + "/echo", data=b"x" * 300_000) as r:
                echoed = await r.json()
            async with s.get(base + "/nowhere/") as r:
                missing = (r.status, await r.json())
            async with s.post(base + "/hello") as r:
                wrong = (r.status, r.headers.get("Allow"))
        return [streamed, echoed, missing, wrong]

    streamed, echoed, missing, wrong = run(echo_router(), go)
    assert streamed == b"".join(b"data: %d\n\n" % i for i in range(50)) + b"data: [DONE]\n\n"
    assert echoed["len"] == 300_000
    assert missing[0] == 404 and "Not Found: /nowhere/" in missing[1]["error"]["message"]
    assert wrong == (405, "GET")


def test_chunked_request_body_and_100_continue() -> None:
    body = b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
    req = (
        b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
        b"Expect: 100-continue\r\nConnection: close\r\n\r\n" + body
    )
    out = run(echo_router(), lambda s: raw(s.port, req))
    assert out.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK")
    assert b'{"len":11,"ct":""}' in out


def test_large_pieces_go_out_whole() -> None:
    big = bytes(range(256)) * 100  # 25,600 bytes: the writelines path

    async def stream(ex: Exchange) -> None:
        ex.start(200, b"application/octet-stream")
        ex.send(big)
        ex.send(b"small")
        ex.end(big)

    async def go(server: HTTPServer) -> bytes:
        async with (
            aiohttp.ClientSession() as s,
            s.get(f"http://127.0.0.1:{server.port}/") as r,
        ):
            return await r.read()

    assert run(stream, go) == big + b"small" + big


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 5000 + b"\r\n\r\n", 431),
        (post("/echo", b"x" * 3000), 413),
        (b"GARBAGE\r\n\r\n", 400),
    ],
)
def test_refusals_answer_then_close(request_bytes: bytes, status: int) -> None:
    limits = Limits(max_head_bytes=4096, max_body_bytes=2048)
    out = run(
        echo_router(),
        lambda s: raw(s.port, request_bytes),
        limits=limits,
        error_body=vllm_error,
    )
    assert out.startswith(b"HTTP/1.1 %d" % status)
    assert b"Connection: close" in out
    body = orjson.loads(out.split(b"\r\n\r\n", 1)[1])
    assert body["object"] == "error" and body["code"] == status


def test_client_gone_mid_stream_cancels_and_tells() -> None:
    seen: dict[str, Any] = {}

    async def forever(ex: Exchange) -> None:
        ex.on_close = lambda: seen.setdefault("on_close", True)
        ex.start(200)
        try:
            while True:
                ex.send(b"data: tick\n\n")
                await asyncio.sleep(0.005)
        except asyncio.CancelledError:
            seen["cancelled"] = True
            raise

    async def go(server: HTTPServer) -> None:
        r, w = await asyncio.open_connection("127.0.0.1", server.port)
        w.write(get("/"))
        await r.readuntil(b"data: tick")
        w.transport.abort()
        for _ in range(200):
            if "cancelled" in seen and not server.connections:
                return
            await asyncio.sleep(0.01)

    run(forever, go)
    assert seen == {"on_close": True, "cancelled": True}


def test_a_plain_handler_finishes_later_and_the_next_request_waits() -> None:
    order: list[str] = []

    def handler(ex: Exchange) -> None:
        order.append("handled " + ex.path)
        if ex.path == "/later":
            ex.start(200)
            ex.send_framed(ex.frame(b"data: 1\n\n"))
            loop = asyncio.get_running_loop()
            loop.call_later(
                0.05,
                lambda: (
                    order.append("ended"),
                    ex.send_framed(ex.frame(b"x", last=True)),
                    ex.complete(),
                ),
            )
        else:
            ex.respond(200, b"now", None)

    async def go(server: HTTPServer) -> bytes:
        return await raw(server.port, get("/later") + get("/now", b"Connection: close\r\n"))

    out = run(handler, go)
    assert order == ["handled /later", "ended", "handled /now"]
    assert out.index(b"1\r\nx\r\n0\r\n\r\n") < out.index(b"now")


def test_handler_failures_are_500_or_a_cut_stream() -> None:
    def boom(ex: Exchange) -> None:
        raise ValueError("bug")

    async def silent(ex: Exchange) -> None:
        await asyncio.sleep(0)

    async def half(ex: Exchange) -> None:
        ex.start(200)
        ex.send(b"data: 1\n\n")

    router = Router()
    router.get("/boom", boom)
    router.get("/silent", silent)
    router.get("/half", half)

    async def go(server: HTTPServer) -> list[Any]:
        out = [await raw(server.port, get("/boom"))]
        out.append(await raw(server.port, get("/silent", b"Connection: close\r\n")))
        async with aiohttp.ClientSession() as s:
            try:
                async with s.get(f"http://127.0.0.1:{server.port}/half") as r:
                    await r.read()
                out.append("complete")
            except aiohttp.ClientPayloadError:
                out.append("cut")
        return out

    boom_out, silent_out, half_out = run(router, go)
    assert boom_out.startswith(b"HTTP/1.1 500") and b"Connection: close" in boom_out
    assert silent_out.startswith(b"HTTP/1.1 500") and b"without a response" in silent_out
    assert half_out == "cut"


def test_drain_finishes_in_flight_closes_idle_refuses_new() -> None:
    async def slow(ex: Exchange) -> None:
        ex.start(200)
        for _ in range(10):
            ex.send(b"data: x\n\n")
            await asyncio.sleep(0.02)
        ex.end()

    async def main() -> tuple[bool, bytes, bytes, bool]:
        server = HTTPServer(slow)
        port = await server.start()
        idle_r, idle_w = await asyncio.open_connection("127.0.0.1", port)
        busy_r, busy_w = await asyncio.open_connection("127.0.0.1", port)
        busy_w.write(get("/"))
        await busy_r.readuntil(b"data: x")
        await asyncio.sleep(0.01)
        clean = await server.drain(5.0)
        rest = await asyncio.wait_for(busy_r.read(), 5)
        idle = await asyncio.wait_for(idle_r.read(), 5)
        try:
            await asyncio.open_connection("127.0.0.1", port)
            refused = False
        except OSError:
            refused = True
        idle_w.close()
        busy_w.close()
        return clean, rest, idle, refused

    clean, rest, idle, refused = arun(main())
    assert clean and rest.endswith(b"0\r\n\r\n") and rest.count(b"data: x") == 9
    assert idle == b"" and refused


def test_drain_timeout_aborts_what_is_left() -> None:
    async def forever(ex: Exchange) -> None:
        ex.start(200)
        await asyncio.sleep(60)

    async def main() -> tuple[bool, int]:
        server = HTTPServer(forever)
        port = await server.start()
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(get("/"))
        await r.readuntil(b"\r\n\r\n")
        clean = await server.drain(0.1)
        w.close()
        return clean, len(server.connections)

    assert arun(main()) == (False, 0)


def test_idle_keep_alive_connections_time_out() -> None:
    async def go(server: HTTPServer) -> tuple[bytes, float]:
        loop = asyncio.get_running_loop()
        t = loop.time()
        out = await raw(server.port, get("/hello?x"), wait=10)
        return out, loop.time() - t

    out, took = run(echo_router(), go, limits=Limits(keepalive_timeout_s=0.2))
    assert out.endswith(b"hello x") and 0.15 < took < 8


def test_http10_stream_ends_with_the_connection() -> None:
    req = b"GET /stream?2 HTTP/1.0\r\n\r\n"
    out = run(echo_router(), lambda s: raw(s.port, req))
    head, body = out.split(b"\r\n\r\n", 1)
    assert b"Transfer-Encoding" not in head and b"Connection: close" in head
    assert body == b"data: 0\n\ndata: 1\n\ndata: [DONE]\n\n"


def test_on_connect_and_disconnect_see_each_connection() -> None:
    events: list[str] = []

    def hello(ex: Exchange) -> None:
        ex.respond(200, str(ex.conn.tag).encode(), None)

    def connect(conn: Any) -> None:
        conn.tag = "tagged"
        events.append("open")

    async def go(server: HTTPServer) -> bytes:
        out = await raw(server.port, get("/", b"Connection: close\r\n"))
        for _ in range(100):
            if len(events) == 2:
                break
            await asyncio.sleep(0.01)
        return out

    out = run(hello, go, on_connect=connect, on_disconnect=lambda c: events.append("close"))
    assert out.endswith(b"tagged") and events == ["open", "close"]


def test_a_held_head_goes_out_with_the_body_in_one_write() -> None:
    writes: list[bytes] = []

    def connect(conn: Any) -> None:
        real = conn.write

        def counted(data: bytes) -> None:
            writes.append(data)
            real(data)

        conn.write = counted

    def whole(ex: Exchange) -> None:
        ex.start(200, flush=False)
        ex.end(b"data: all\n\n")

    out = run(whole, lambda s: raw(s.port, get("/", b"Connection: close\r\n")), on_connect=connect)
    assert len(writes) == 1 and writes[0] == out
    assert out.endswith(b"b\r\ndata: all\n\n\r\n0\r\n\r\n")
