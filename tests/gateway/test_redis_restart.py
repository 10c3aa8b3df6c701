"""Redis restarted without persistence: the buckets do not come back full, and ``/health``
says the replica cannot admit while Redis is away (issue 25, point 7)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
from harness import client, complete, gateway_config, running, sim, url, wait_until
from redis_server import start_redis

from servetune.gateway.keys import hash_key, new_key


def test_a_redis_restart_neither_refills_the_buckets_nor_hides_from_health(
    tmp_path: Path,
) -> None:
    """Before: the restarted Redis had no bucket, so every tenant's was full again — a tenant
    that had used its minute got another (1.30× the bound); and ``/health`` answered "ok"
    while every quota'd request got 503."""
    engine = sim()
    redis = start_redis(tmp_path)
    key = new_key()
    rpm = 20

    async def health(s: aiohttp.ClientSession, gw: object) -> int:
        async with s.get(url(gw, "/health")) as r:  # type: ignore[arg-type]
            return r.status

    async def main() -> None:
        nonlocal redis
        cfg = gateway_config(
            tmp_path, groups=[{"name": "g", "urls": [engine.base_url]}], redis=redis.url,
            lease_s=3, tenants=[{"name": "t", "keys": [hash_key(key)], "rpm": rpm}],
        )  # fmt: skip
        async with running(cfg) as gw, client() as s:
            codes = [(await complete(s, gw, key=key, max_tokens=1))[0] for _ in range(rpm)]
            assert codes == [200] * rpm  # the minute's allowance used up
            assert (await complete(s, gw, key=key, max_tokens=1))[0] == 429
            redis.stop()
            assert (await complete(s, gw, key=key, max_tokens=1))[0] == 503  # fail closed
            assert await health(s, gw) == 503

            redis = start_redis(tmp_path, port=redis.port)  # empty: no persistence

            async def healthy() -> bool:
                return await health(s, gw) == 200

            await wait_until(healthy, 30, "health back once Redis answers")
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            codes = [(await complete(s, gw, key=key, max_tokens=1))[0] for _ in range(rpm)]
            took = loop.time() - t0
        admitted = codes.count(200)
        # what refilled since the loss, not a fresh minute: rpm × seconds / 60 (+1 rounding)
        assert admitted <= rpm * (took + 10) / 60 + 1, (admitted, took, codes)
        assert 429 in codes

    try:
        asyncio.run(main())
    finally:
        redis.stop()
        engine.stop()
