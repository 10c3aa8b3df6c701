"""Upstream failures: retries only before the first byte, circuit breaker, idle streams ended
with an error event inside the 200, streams cut mid-way reported as such."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
from harness import client, gateway_config, running, url
from redis_server import free_port

MODEL = "scripted-model"


async def post(s: aiohttp.ClientSession, u: str, max_tokens: int = 5) -> tuple[int, bytes]:
    body = {"model": MODEL, "prompt": "a b c", "max_tokens": max_tokens, "stream": True}
    async with s.post(u, json=body) as r:
        return r.status, await r.read()


def test_dead_upstream_is_retried_around_and_its_circuit_opens(
    scripted: Callable[..., Any], tmp_path: Path
) -> None:
    live = scripted({"model": MODEL})
    dead = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there

    async def main() -> None:
        cfg = gateway_config(
            tmp_path,
            groups=[{"name": "g", "urls": [dead, live.base_url], "max_concurrency": 4,
                     "adaptive": False}],
            breaker={"failures": 2, "cooldown_s": 30}, metrics_open=True,
        )  # fmt: skip
        async with running(cfg) as gw, client() as s:
            codes = [(await post(s, url(gw)))[0] for _ in range(10)]
            assert codes == [200] * 10  # the dead one fails before any byte: retried
            dead_up = next(u for u in gw.pools["g"].upstreams if u.url == dead)
            assert dead_up.breaker.state == "open"
            async with s.get(url(gw, "/metrics")) as r:
                text = await r.text()
            assert "servetune_gateway_retries_total" in text and "upstream_circuit_open" in text

    asyncio.run(main())


def test_upstream_500_before_the_first_byte_is_retried_not_after(
    scripted: Callable[..., Any], tmp_path: Path
) -> None:
    flaky = scripted({"model": MODEL, "fail_every": 2, "tpot_ms": 1})
    good = scripted({"model": MODEL, "tpot_ms": 1})
    cut = scripted({"model": MODEL, "disconnect_every": 1, "tpot_ms": 1})

    async def main() -> None:
        cfg = gateway_config(
            tmp_path,
            groups=[{"name": "g", "urls": [flaky.base_url, good.base_url], "adaptive": False},
                    {"name": "c", "urls": [cut.base_url], "weight": 0}],
            retries=2,
        )  # fmt: skip
        async with running(cfg) as gw, client() as s:
            for _ in range(6):
                status, body = await post(s, url(gw))
                assert status == 200 and body.rstrip().endswith(b"[DONE]")
            gw.router.set({"g": 0, "c": 100})
            status, body = await post(s, url(gw), max_tokens=20)
            # cut mid-stream: already committed, so not retried; the client is told so
            assert status == 200 and b'"upstream_error"' in body and b"mid-response" in body

    asyncio.run(main())


def test_idle_stream_ends_with_an_error_event(scripted: Callable[..., Any], tmp_path: Path) -> None:
    """The upstream's next token is 30 s away: the stream ends at idle_s (0.5 s), long
    before (a margin for a loaded box, and not close to the 30 s either)."""
    slow = scripted({"model": MODEL, "tpot_ms": 30000})

    async def main() -> tuple[int, bytes, float]:
        cfg = gateway_config(
            tmp_path, groups=[{"name": "g", "urls": [slow.base_url]}], timeouts={"idle_s": 0.5}
        )
        async with running(cfg) as gw, client() as s:
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            status, body = await post(s, url(gw))
            return status, body, loop.time() - t0

    status, body, took = asyncio.run(main())
    assert (
        status == 200 and b'"upstream_idle_timeout"' in body and body.rstrip().endswith(b"[DONE]")
    )
    assert took < 10.0


def test_whole_answer_stalled_after_its_head_is_ended_and_its_slot_freed(tmp_path: Path) -> None:
    """A non-streamed answer whose upstream sends the head and then nothing: after idle_s the
    client gets a 502 and the upstream's only slot is free again (before: both waited for as
    long as the upstream kept the connection open)."""

    async def stalling(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                await reader.readexactly(length)
                if head.startswith(b"GET"):
                    body = (
                        b'{"object":"list","data":[{"id":"%s","object":"model"}]}' % MODEL.encode()
                    )
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))  # fmt: skip
                    continue
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Content-Length: 200\r\n\r\n{")  # fmt: skip
                await asyncio.sleep(30)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def main() -> tuple[list[int], float]:
        server = await asyncio.start_server(stalling, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            cfg = gateway_config(
                tmp_path,
                groups=[{"name": "g", "urls": [f"http://127.0.0.1:{port}/v1"],
                         "max_concurrency": 1, "adaptive": False}],
                timeouts={"idle_s": 0.5},
            )  # fmt: skip
            async with running(cfg) as gw, client() as s:
                loop = asyncio.get_running_loop()
                t0 = loop.time()
                codes = []
                for _ in range(2):  # the second needs the slot the first held
                    body = {"model": MODEL, "prompt": "a b c", "max_tokens": 5}
                    async with s.post(url(gw), json=body) as r:
                        codes.append(r.status)
                        await r.read()
                return codes, loop.time() - t0
        finally:
            server.close()

    codes, took = asyncio.run(main())
    assert codes == [502, 502]
    assert took < 10.0


def test_no_head_within_first_byte_s_is_retried_elsewhere_then_a_504(
    scripted: Callable[..., Any], tmp_path: Path
) -> None:
    """An upstream that sends no response head within timeouts.first_byte_s counts as failed
    before the first byte: retried on another upstream, a 504 when none is left; the late
    upstream's slot is freed either way (the deadlines share one timer)."""
    late = scripted({"model": MODEL, "ttft_ms": 20000, "one_write": True})
    good = scripted({"model": MODEL, "one_write": True})

    async def main() -> tuple[list[int], list[float], bytes]:
        cfg = gateway_config(
            tmp_path,
            groups=[{"name": "g", "urls": [late.base_url], "max_concurrency": 1,
                     "adaptive": False},
                    {"name": "two", "urls": [late.base_url, good.base_url],
                     "max_concurrency": 1, "adaptive": False, "weight": 0}],
            timeouts={"first_byte_s": 0.5},
            retries=1,
        )  # fmt: skip
        async with running(cfg) as gw, client() as s:
            loop = asyncio.get_running_loop()
            codes, took = [], []
            body = b""
            for _ in range(2):  # the second needs the slot the first held
                t0 = loop.time()
                status, body = await post(s, url(gw))
                codes.append(status)
                took.append(loop.time() - t0)
            assert gw.pools["g"].upstreams[0].inflight == 0
            gw.router.set({"g": 0, "two": 100})
            for _ in range(2):  # least loaded first: the late one is tried and failed over
                status, _b = await post(s, url(gw))
                codes.append(status)
            assert len(gw.head_deadlines) == 0
            return codes, took, body

    codes, took, body = asyncio.run(main())
    assert codes == [504, 504, 200, 200]  # tried twice, then a timeout's 504
    assert b"no response head within 0.5 s" in body
    assert all(0.45 < t < 10.0 for t in took), took


def test_client_leaving_before_the_head_frees_its_slot_and_quota(
    scripted: Callable[..., Any], tmp_path: Path
) -> None:
    slow = scripted({"model": MODEL, "ttft_ms": 3000, "one_write": True})  # a late head

    async def main() -> None:
        cfg = gateway_config(
            tmp_path,
            groups=[{"name": "g", "urls": [slow.base_url], "max_concurrency": 2,
                     "adaptive": False}],
            defaults={"max_concurrency": 2},
        )  # fmt: skip
        async with running(cfg) as gw, aiohttp.ClientSession() as s:
            for _ in range(3):  # more than the slots: a leak would leave them all taken
                try:
                    await asyncio.wait_for(post(s, url(gw)), 0.3)
                except TimeoutError:
                    pass
            up = gw.pools["g"].upstreams[0]
            deadline = asyncio.get_running_loop().time() + 30
            while asyncio.get_running_loop().time() < deadline:  # the disconnects reach it
                if up.inflight == 0 and gw.store.inflight("default") == 0:  # type: ignore[attr-defined]
                    break
                await asyncio.sleep(0.05)
            assert up.inflight == 0
            assert gw.store.inflight("default") == 0  # type: ignore[attr-defined]

    asyncio.run(main())


def test_finished_requests_leave_no_reference_cycles(
    scripted: Callable[..., Any], tmp_path: Path
) -> None:
    """A request's objects are freed by reference counting as it ends: cycles left to the
    cyclic collector cost a pause of ~10 ms every few hundred requests at 500 req/s."""
    import gc

    from servetune.gateway.flight import Flight
    from servetune.gateway.relay import Relay

    up = scripted({"model": MODEL, "one_write": True})

    async def main() -> None:
        cfg = gateway_config(
            tmp_path,
            groups=[{"name": "g", "urls": [up.base_url], "adaptive": False}],
            defaults={"max_concurrency": 4, "tpm": 1_000_000},
        )  # fmt: skip
        async with running(cfg) as gw, aiohttp.ClientSession() as s:
            for _ in range(5):
                assert (await post(s, url(gw)))[0] == 200
            gc.collect()
            gc.disable()
            try:
                for _ in range(20):
                    assert (await post(s, url(gw)))[0] == 200
                # The client has its answers; the gateway may still be finishing the last
                # requests on a loaded box. With the collector off, only reference counting
                # frees them: a cycle keeps them until the deadline.
                # (Counted, not listed: a list would keep them alive for the next look.)
                deadline = asyncio.get_running_loop().time() + 10
                while True:
                    left = sum(isinstance(o, Flight | Relay) for o in gc.get_objects())
                    if not left or asyncio.get_running_loop().time() > deadline:
                        break
                    await asyncio.sleep(0.1)
            finally:
                gc.enable()
            assert left == 0, f"{left} Flight/Relay objects outlived their requests"

    asyncio.run(main())
