"""Gateway test harness: the simulated engine as upstream (a process), the gateway in the
test's event loop, an aiohttp client. Everything on 127.0.0.1, stopped by itself."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

from servetune.gateway.app import Gateway
from servetune.gateway.config import GatewayConfig, parse_config
from servetune.sim.config import EngineConfig
from servetune.sim.embedded import EmbeddedServer, start_embedded

MODEL = "Qwen/Qwen2.5-7B-Instruct"
CLIENT_TIMEOUT = aiohttp.ClientTimeout(total=120, sock_connect=10)
"""Every test request ends (or fails) within this: aiohttp's default lets one wait 5 min."""


def client() -> aiohttp.ClientSession:
    """An aiohttp session whose requests are bounded by :data:`CLIENT_TIMEOUT`."""
    return aiohttp.ClientSession(timeout=CLIENT_TIMEOUT)


async def stop_tasks(tasks: list[asyncio.Task[Any]], timeout_s: float = 30.0) -> None:
    """Wait at most ``timeout_s`` for all of ``tasks`` together, then cancel what is left
    (and wait, bounded, for the cancellations); their errors are the test's to check."""
    if not tasks:
        return
    _done, pending = await asyncio.wait(tasks, timeout=timeout_s)
    for t in pending:
        t.cancel()
    if pending:
        await asyncio.wait(pending, timeout=10.0)


def sim(**knobs: Any) -> EmbeddedServer:
    return start_embedded(EngineConfig(max_model_len=4096, **knobs))


def gateway_config(tmp: Path, **data: Any) -> GatewayConfig:
    data.setdefault("listen", "127.0.0.1:0")
    data.setdefault("audit_log", str(tmp / "audit.jsonl"))
    return parse_config(data, "test")


@contextlib.asynccontextmanager
async def running(cfg: GatewayConfig, path: str | None = None) -> AsyncIterator[Gateway]:
    gw = Gateway(cfg, path)
    await gw.start()
    try:
        yield gw
    finally:
        await gw.stop(drain_s=2.0)


def url(gw: Gateway, path: str = "/v1/completions") -> str:
    return f"http://127.0.0.1:{gw.port}{path}"


async def complete(
    session: aiohttp.ClientSession,
    gw: Gateway,
    key: str | None = None,
    max_tokens: int = 8,
    stream: bool = True,
    prompt: str = "the cat sat on the mat",
    **extra: Any,
) -> tuple[int, bytes, dict[str, str]]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    body = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "stream": stream, **extra}
    async with session.post(url(gw), json=body, headers=headers) as r:
        return r.status, await r.read(), dict(r.headers)


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)", re.M)


async def engine_metric(srv: EmbeddedServer, name: str, **labels: str) -> float:
    async with client() as s, s.get(srv.metrics_url) as r:
        text = await r.text()
    total = 0.0
    for m in _SAMPLE.finditer(text):
        if m.group(1) == name and all(
            f'{k}="{v}"' in (m.group(2) or "") for k, v in labels.items()
        ):
            total += float(m.group(3))
    return total


async def wait_until(cond: Any, timeout_s: float = 20.0, what: str = "condition") -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout_s
    while not await cond():
        if loop.time() > end:
            raise AssertionError(f"not within {timeout_s:g} s: {what}")
        await asyncio.sleep(0.05)
