"""The smaller defects of issue 25, point 7 — each test failed before its fix."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from harness import MODEL, client, gateway_config, running, sim, url

from servetune.gateway.app import Gateway
from servetune.gateway.keys import hash_key, new_key


async def raw_request(port: int, head: bytes, body: bytes) -> tuple[int, bytes]:
    """One HTTP/1.1 request written by hand (headers as given, duplicates included)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(head + b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
        await writer.drain()
        data = await asyncio.wait_for(reader.read(-1), 30)
    finally:
        writer.close()
    return int(data.split(b" ", 2)[1]), data


def test_two_authorization_headers_are_refused(tmp_path: Path) -> None:
    """Before: the first header won silently (a proxy in front may read the other)."""
    engine = sim()
    a, b = new_key(), new_key()

    async def main() -> None:
        cfg = gateway_config(
            tmp_path,
            groups=[{"name": "g", "urls": [engine.base_url]}],
            tenants=[{"name": "a", "keys": [hash_key(a)]}, {"name": "b", "keys": [hash_key(b)]}],
        )
        body = json.dumps({"model": MODEL, "prompt": "hi", "max_tokens": 2}).encode()
        async with running(cfg) as gw:
            start = (
                b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            )
            for extra in (
                b"Authorization: Bearer %s\r\nAuthorization: Bearer %s\r\n"
                % (a.encode(), b.encode()),
                b"Authorization: Bearer %s\r\nAuthorization: Bearer %s\r\n"
                % (a.encode(), a.encode()),
                b"Authorization: Bearer %s\r\nx-api-key: %s\r\n" % (a.encode(), b.encode()),
            ):
                status, data = await raw_request(gw.port, start + extra, body)
                assert status == 400 and b"more than one API key" in data, data
            # one key, or the same key in both places: served
            for extra in (
                b"Authorization: Bearer %s\r\n" % a.encode(),
                b"Authorization: Bearer %s\r\nx-api-key: %s\r\n" % (a.encode(), a.encode()),
            ):
                status, data = await raw_request(gw.port, start + extra, body)
                assert status == 200, data

    try:
        asyncio.run(main())
    finally:
        engine.stop()


@pytest.mark.parametrize(
    "steps", [["a", 50], 5, {"x": 1}, [True, 100], [None], [200], "5,x", [50, 25]]
)
def test_a_wrongly_typed_rollout_steps_is_a_400(tmp_path: Path, steps: Any) -> None:
    """Before: ``["a", 50]``, ``5``, ``{"x": 1}``, ``[null]`` answered 500 with a traceback in
    the log; ``[200]``, ``"5,x"`` and falling steps a 409 (a conflict, which they are not)."""
    admin = new_key()

    async def main() -> None:
        cfg = gateway_config(
            tmp_path,
            auth="off",
            admin_keys=[hash_key(admin)],
            groups=[{"name": "base", "urls": ["http://127.0.0.1:9/v1"]},
                    {"name": "cand", "urls": ["http://127.0.0.1:9/v1"], "weight": 0}],
        )  # fmt: skip
        async with running(cfg) as gw, client() as s:
            async with s.post(
                url(gw, "/admin/rollout"),
                json={"candidate": "cand", "steps": steps},
                headers={"Authorization": f"Bearer {admin}"},
            ) as r:
                assert r.status == 400, await r.text()
                err = (await r.json())["error"]
            assert "steps" in err["message"], err
            assert not gw.rollouts.running

    asyncio.run(main())


def test_an_answer_slower_than_first_byte_s_is_tried_once_on_its_engine(
    scripted: Callable[..., Any], tmp_path: Path
) -> None:
    """Before: a non-streamed answer slower than ``first_byte_s`` was sent three times to the
    same engine (which made it three times) and counted as a ``connect`` failure."""
    late = scripted({"model": "scripted-model", "ttft_ms": 3000, "one_write": True})

    async def main() -> None:
        cfg = gateway_config(
            tmp_path,
            groups=[{"name": "g", "urls": [late.base_url], "adaptive": False}],
            timeouts={"first_byte_s": 0.5},
            retries=2,
        )
        async with running(cfg) as gw, client() as s:
            body = {"model": "scripted-model", "prompt": "a b", "max_tokens": 3, "stream": False}
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            async with s.post(url(gw), json=body) as r:
                status, text = r.status, await r.text()
            took = loop.time() - t0
            assert status == 504 and "no response head within 0.5 s" in text, text
            assert took < 2.5, took  # one try of 0.5 s, not three
            assert dict(gw.metrics.failures) == {(gw.pools["g"].upstreams[0].url, "timeout"): 1}
            assert not gw.metrics.retries

    asyncio.run(main())


def test_a_stream_open_when_the_drain_ends_gets_an_error_event(tmp_path: Path) -> None:
    """Before: the stream was cut bare when the shutdown drain ran out — the client could not
    tell a stop of the gateway from a lost connection."""
    engine = sim()

    async def main() -> bytes:
        cfg = gateway_config(tmp_path, groups=[{"name": "g", "urls": [engine.base_url]}])
        gw = Gateway(cfg)
        await gw.start()
        body = {"model": MODEL, "prompt": "hi", "max_tokens": 3000, "stream": True}
        async with client() as s, s.post(url(gw), json=body) as r:
            assert r.status == 200
            first = await r.content.readany()  # streaming now
            stopping = asyncio.create_task(gw.stop(drain_s=1.5))
            rest = await r.content.read()
            await asyncio.wait_for(stopping, 30)
        return first + rest

    try:
        data = asyncio.run(main())
    finally:
        engine.stop()
    events = [e for e in data.split(b"\n\n") if e.startswith(b"data:")]
    assert events[-1] == b"data: [DONE]", data[-300:]
    err = json.loads(events[-2][5:])["error"]
    assert err["type"] == "gateway_shutdown" and err["code"] == 503, err
