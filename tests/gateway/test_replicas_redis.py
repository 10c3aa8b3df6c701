"""Three gateway processes sharing one real Redis: limits hold across replicas exactly."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import MODEL, client, sim
from redis_server import RedisServer

from servetune.sim.embedded import EmbeddedServer

_LISTEN = re.compile(r"listening on http://127\.0\.0\.1:(\d+)")


START_S = 60.0
"""A gateway process prints its address within this (imports on a loaded box take seconds)."""


def start_gateway(args: list[str], tmp: Path) -> tuple[subprocess.Popen[str], int]:
    """A ``servetune gateway`` process; its output is read to the end by a thread (a full
    pipe would block the gateway's logging, and so its event loop)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "servetune.cli", "gateway", "--listen", "127.0.0.1:0",
         "--audit-log", str(tmp / "audit.jsonl"), "--log-level", "warning", *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    lines: deque[str] = deque(maxlen=200)
    port: list[int] = []
    ready = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            m = _LISTEN.search(line)
            if m and not port:
                port.append(int(m.group(1)))
                ready.set()
        ready.set()  # the output ended: the process exited

    threading.Thread(target=read, daemon=True).start()
    if ready.wait(START_S) and port:
        return proc, port[0]
    stop(proc)
    raise RuntimeError(
        f"gateway did not start within {START_S:g} s (exit code {proc.poll()}):\n" + "".join(lines)
    )


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@pytest.fixture
def engine() -> Iterator[EmbeddedServer]:
    srv = sim()
    yield srv
    srv.stop()


@pytest.fixture
def replicas(
    redis_server: RedisServer,
    engine: EmbeddedServer,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[list[int]]:
    extra: list[str] = request.param
    procs = []
    try:
        for i in range(3):
            d = tmp_path / f"r{i}"
            d.mkdir()
            procs.append(
                start_gateway(
                    ["--upstream", engine.base_url, "--redis", redis_server.url, *extra], d
                )
            )
        yield [port for _, port in procs]
    finally:
        for proc, _ in procs:
            stop(proc)


async def spread(ports: list[int], n: int, max_tokens: int = 8) -> list[int]:
    async with client() as s:

        async def one(i: int) -> int:
            body = {
                "model": MODEL,
                "prompt": "hello there",
                "max_tokens": max_tokens,
                "stream": True,
            }
            url = f"http://127.0.0.1:{ports[i % len(ports)]}/v1/completions"
            async with s.post(url, json=body) as r:
                await r.read()
                return r.status

        return list(await asyncio.gather(*(one(i) for i in range(n))))


@pytest.mark.parametrize("replicas", [["--rpm", "10"]], indirect=True)
def test_rpm_10_across_three_replicas_admits_exactly_10_of_30(replicas: list[int]) -> None:
    codes = asyncio.run(spread(replicas, 30))
    assert codes.count(200) == 10 and codes.count(429) == 20, codes


@pytest.mark.parametrize("replicas", [["--max-concurrency", "4"]], indirect=True)
def test_concurrency_cap_across_three_replicas(replicas: list[int]) -> None:
    codes = asyncio.run(spread(replicas, 24, max_tokens=300))
    assert codes.count(200) == 4 and codes.count(429) == 20, codes
