"""The real-time engine loop in-process: finished and aborted requests leave no garbage.

The loop freezes whatever is alive after each step (``gc.freeze``), so an object that only a
collection could free stays until the engine goes idle: under steady load, forever. Request,
stream, exchange and connection must therefore be freed by reference counting alone.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator

import aiohttp
import pytest

from servetune.http import Exchange, ServerConnection
from servetune.sim.config import EngineConfig
from servetune.sim.engine import SimRequest
from servetune.sim.server import SimServer
from servetune.sim.streams import Stream

OURS = (Exchange, Stream, SimRequest, ServerConnection)


@pytest.fixture
def saved_garbage() -> Iterator[list[object]]:
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield gc.garbage
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


def test_requests_done_or_aborted_are_freed_without_a_collection(
    saved_garbage: list[object],
) -> None:
    async def main() -> list[str]:
        srv = SimServer(EngineConfig(max_model_len=4096))
        port = await srv.start()
        url = f"http://127.0.0.1:{port}/v1/completions"
        body = {"prompt": "w " * 50, "max_tokens": 5, "stream": True}
        try:
            async with aiohttp.ClientSession() as s:

                async def one(extra: dict[str, object]) -> None:
                    async with s.post(url, json={**body, **extra}) as r:
                        await r.read()

                await asyncio.gather(*[one({}) for _ in range(30)])
                await asyncio.gather(*[one({"stream": False}) for _ in range(5)])
                await one({"max_tokens": 10**6})  # refused: 400
                for _ in range(5):  # hang up mid-stream: aborted in the engine
                    async with s.post(url, json={**body, "max_tokens": 500}) as r:
                        await r.content.readline()
            await asyncio.sleep(0.3)
            gc.unfreeze()
            gc.collect()
            return [type(o).__name__ for o in saved_garbage if isinstance(o, OURS)]
        finally:
            await srv.close()

    assert asyncio.run(main()) == []
