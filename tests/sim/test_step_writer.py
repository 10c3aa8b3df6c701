"""The step writer setting: plain by default, fanout opt-in and validated, both correct."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from typing import Any

import aiohttp
import pytest

from servetune.errors import ConfigError, SimError
from servetune.http import Exchange, HTTPServer, ServerConnection
from servetune.http.wire import frame, frame_last
from servetune.sim import step_writer
from servetune.sim.config import EngineConfig
from servetune.sim.embedded import start_embedded
from servetune.sim.fanout import CHUNK, Fanout
from servetune.sim.step_writer import LAST, WHOLE, StepWriter, Write, writer_mode


def _aio() -> bool:
    f = Fanout.create(realtime=False)
    if f is None:
        return False
    f.close()
    return True


needs_aio = pytest.mark.skipif(not _aio(), reason="Linux AIO is not available here")


def test_writer_setting_is_validated() -> None:
    assert writer_mode("plain") == "plain" and writer_mode("fanout") == "fanout"
    with pytest.raises(ConfigError, match="unknown step writer 'serial'") as e:
        writer_mode("serial")
    assert e.value.hint is not None and "plain" in e.value.hint
    with pytest.raises(ConfigError):
        start_embedded(EngineConfig(max_model_len=4096), writer="threads")
    out = subprocess.run(
        [sys.executable, "-m", "servetune.sim.server", "--config-json", "{}", "--writer", "x"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and "invalid choice: 'x'" in out.stderr


def test_the_default_writer_is_plain_and_leaves_the_interpreter_alone() -> None:
    before = sys.getswitchinterval()
    w = StepWriter()
    assert w.mode == "plain" and w.fanout is None and w.name == "plain"
    assert sys.getswitchinterval() == before
    assert w.dup(None) == -1
    w.close()


def test_fanout_where_aio_is_missing_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(step_writer.Fanout, "create", classmethod(lambda cls, realtime: None))
    before = sys.getswitchinterval()
    with pytest.raises(SimError, match="needs Linux AIO") as e:
        StepWriter("fanout")
    assert e.value.hint is not None and "writer=plain" in e.value.hint
    assert sys.getswitchinterval() == before


def _write_steps(mode: str, n_streams: int, full: int | None = None) -> dict[str, Any]:
    """``n_streams`` streams on real loopback connections; two steps written by the writer
    (the second ends the streams); what each client read, and the writer's figures."""

    async def main() -> dict[str, Any]:
        interval = sys.getswitchinterval()
        writer = StepWriter(mode)  # type: ignore[arg-type]
        exchanges: list[Exchange] = []

        def handler(ex: Exchange) -> None:
            ex.start(200)
            exchanges.append(ex)

        def connect(conn: ServerConnection) -> None:
            conn.tag = writer.dup(conn.sock)

        def disconnect(conn: ServerConnection) -> None:
            writer.retire(conn.tag)

        server = HTTPServer(handler, on_connect=connect, on_disconnect=disconnect)
        port = await server.start()
        clients = [await asyncio.open_connection("127.0.0.1", port) for _ in range(n_streams)]
        for _, w in clients:
            w.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        while len(exchanges) < n_streams:
            await asyncio.sleep(0.001)
        exchanges.sort(key=lambda ex: ex.conn.peer[1])
        clients.sort(key=lambda c: c[1].get_extra_info("sockname")[1])
        if full is not None:  # a client that reads nothing: its socket fills up
            big = exchanges[full]
            while not big.conn.buffered:
                big.send(b"z" * 65536)
                await asyncio.sleep(0)
        stamps_all = []
        for step in range(2):
            kind = LAST if step else 0
            writes: list[Write] = [
                (ex, ex.frame(b"s%d-%d;" % (step, i), last=bool(step)), kind)
                for i, ex in enumerate(exchanges)
            ]
            target = time.perf_counter() + 0.01
            writer.arm(writes, target)
            # uvloop's timers fire in whole milliseconds, up to one early (the engine loop
            # sleeps the rest precisely, realtime.SPIN_S): so does the test
            await asyncio.sleep(max(0.0, target - time.perf_counter() - 0.002))
            while (t_start := time.perf_counter()) < target:
                time.sleep(max(0.0, target - t_start))
            stamps, _, side = writer.send(writes, t_start)
            for ex, _, k in writes:
                if k == LAST:
                    ex.complete()
            assert len(stamps) == n_streams and min(stamps) >= target
            stamps_all.append((len(stamps), side is not None))
        reads = []
        for i, (r, _) in enumerate(clients):
            if i == full:
                reads.append(b"")
                continue
            data = b""
            while not data.endswith(b"0\r\n\r\n"):
                data += await asyncio.wait_for(r.read(65536), 10)
            reads.append(data)
        name, during = writer.name, sys.getswitchinterval()
        for _, w in clients:
            w.close()
        await server.drain(1.0)
        writer.close()
        return {
            "reads": reads,
            "steps": stamps_all,
            "name": name,
            "interval": (interval, during, sys.getswitchinterval()),
        }

    return asyncio.run(main())


@pytest.mark.parametrize("mode", ["plain", pytest.param("fanout", marks=needs_aio)])
def test_every_stream_gets_its_bytes_once_in_order(mode: str) -> None:
    n = 3 * CHUNK
    out = _write_steps(mode, n)
    for i, data in enumerate(out["reads"]):
        body = data.split(b"\r\n\r\n", 1)[1]
        assert body == frame(b"s0-%d;" % i) + frame_last(b"s1-%d;" % i), (i, body)
    if mode == "fanout":
        assert out["name"].startswith("fanout: two threads")
        assert [split for _, split in out["steps"]] == [True, True]  # the helper wrote half
        default, during, after = out["interval"]
        assert during == pytest.approx(0.0005) and after == default
    else:
        assert out["name"] == "plain"
        assert [split for _, split in out["steps"]] == [False, False]


@needs_aio
def test_fanout_sends_what_a_full_socket_refuses_through_its_transport() -> None:
    out = _write_steps("fanout", 2 * CHUNK, full=5)
    assert all(out["reads"][i].endswith(b"0\r\n\r\n") for i in range(2 * CHUNK) if i != 5)
    assert [n for n, _ in out["steps"]] == [2 * CHUNK, 2 * CHUNK]  # every write counted


def test_whole_responses_go_through_the_exchange() -> None:
    async def main() -> bytes:
        writer = StepWriter()
        got: list[Exchange] = []
        server = HTTPServer(got.append)
        port = await server.start()
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(b"POST / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        while not got:
            await asyncio.sleep(0.001)
        stamps, _, _ = writer.send([(got[0], b'{"whole": true}', WHOLE)], time.perf_counter())
        assert len(stamps) == 1 and got[0].finished
        out = await asyncio.wait_for(r.read(), 10)
        w.close()
        await server.drain(1.0)
        return out

    out = asyncio.run(main())
    assert out.startswith(b"HTTP/1.1 200 OK") and out.endswith(b'{"whole": true}')


@needs_aio
def test_the_server_runs_with_either_writer() -> None:
    async def stream_and_stats(url: str) -> dict[str, Any]:
        body = {"prompt": "w " * 50, "max_tokens": 10, "stream": True}
        async with aiohttp.ClientSession() as s:
            for _ in range(2):
                async with s.post(url + "/v1/completions", json=body) as r:
                    text = await r.text()
                    assert text.count('"text":') == 10 and text.endswith("data: [DONE]\n\n")
            async with s.get(url + "/sim/stats") as r:
                out: dict[str, Any] = await r.json()
                return out

    for mode in ("plain", "fanout"):
        srv = start_embedded(EngineConfig(max_model_len=4096), writer=mode)
        try:
            stats = asyncio.run(stream_and_stats(srv.url))
        finally:
            srv.stop()
        assert stats["writer"].startswith(mode), stats["writer"]
        assert stats["emission_lag_ms"]["count"] == 20
        assert json.dumps(stats)  # the read-out is plain JSON
