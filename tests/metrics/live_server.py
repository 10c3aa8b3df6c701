"""A real HTTP server on 127.0.0.1 (aiohttp.web) for the scraper tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@asynccontextmanager
async def serve(routes: dict[str, Handler]) -> AsyncIterator[tuple[str, web.AppRunner]]:
    """Serve ``routes`` (GET) on a free loopback port; yields (base URL, runner)."""
    app = web.Application()
    for path, handler in routes.items():
        app.router.add_get(path, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}", runner
    finally:
        await runner.cleanup()


def text_handler(pages: Callable[[int], str], status: int = 200) -> tuple[Handler, list[int]]:
    """A handler answering ``pages(n)`` to its n-th request (n from 0); and its hit counter."""
    hits = [0]

    async def handle(_: web.Request) -> web.Response:
        n = hits[0]
        hits[0] += 1
        return web.Response(text=pages(n), status=status, content_type="text/plain")

    return handle, hits


async def wait_until(cond: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Poll ``cond`` every 10 ms; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.01)
