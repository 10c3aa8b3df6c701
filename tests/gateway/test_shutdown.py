"""Stopping a gateway ends its background loops even when a cancellation is lost.

On Python 3.11, cancelling a task while it waits in ``asyncio.wait_for(x, t)`` for an ``x``
that ends in the same turn of the loop returns x's result and drops the cancellation
(CPython gh-86296; 3.12 rewrote wait_for). redis-py sends every command through such a
``wait_for`` (its socket timeout), so a gateway's Redis sync loop could miss the cancel of
``Gateway.stop`` and run on while ``stop`` waited for it: test_rollout_redis hung in its
teardown with no CPU used (reproduced under load; the stack dump showed the ``gateway-sync``
task 'cancelling' but asleep in its next period)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from harness import gateway_config, sim
from redis_server import RedisServer

from servetune.aio import cancel_requested, stop_task
from servetune.gateway.app import Gateway

pytestmark = pytest.mark.timeout(120)  # a regression hangs in stop(): fail, do not hang


async def _at_once() -> int:
    return 1


def test_a_loop_asking_cancel_requested_stops_even_when_wait_for_loses_the_cancel() -> None:
    async def loop_body() -> None:
        while not cancel_requested():
            await asyncio.wait_for(_at_once(), 5)  # as redis-py sends a command
            await asyncio.sleep(0.01)

    async def main() -> list[bool]:
        stopped = []
        for turns in range(6):  # cancel at each point of the loop's first turns
            t = asyncio.create_task(loop_body())
            for _ in range(turns):
                await asyncio.sleep(0)
            stopped.append(await stop_task(t, 2.0))
        return stopped

    assert asyncio.run(asyncio.wait_for(main(), 60)) == [True] * 6


def test_stop_task_gives_up_on_a_task_that_will_not_end() -> None:
    async def main() -> tuple[bool, float]:
        release = asyncio.Event()

        async def stubborn() -> None:
            while not release.is_set():
                try:
                    await asyncio.sleep(0.01)
                except asyncio.CancelledError:
                    pass

        t = asyncio.create_task(stubborn())
        await asyncio.sleep(0)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        ok = await stop_task(t, 0.3)
        took = loop.time() - t0
        release.set()
        await asyncio.wait([t], timeout=5)
        return ok, took

    ok, took = asyncio.run(main())
    assert not ok and took < 3


def test_gateway_stops_when_its_redis_sync_loses_the_cancel(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    engine = sim()
    try:

        async def main() -> None:
            cfg = gateway_config(
                tmp_path, redis=redis_server.url, groups=[{"name": "g", "urls": [engine.base_url]}]
            )
            gw = Gateway(cfg)
            await gw.start()
            stopped = False
            try:
                swallowed = []

                async def sync_losing_the_cancel() -> None:
                    try:
                        await asyncio.sleep(5)
                    except asyncio.CancelledError:  # what 3.11's wait_for can do
                        swallowed.append(True)

                gw.rollouts.sync = sync_losing_the_cancel  # type: ignore[method-assign]
                await asyncio.sleep(1.5)  # the sync loop is inside its (5 s) sync now
                loop = asyncio.get_running_loop()
                t0 = loop.time()
                await asyncio.wait_for(gw.stop(drain_s=1.0), 30)
                stopped = True
                assert swallowed == [True]
                assert loop.time() - t0 < 15
                assert all(t.done() for t in gw._tasks)
            finally:
                if not stopped:
                    await asyncio.wait_for(gw.stop(drain_s=1.0), 30)

        asyncio.run(main())
    finally:
        engine.stop()
