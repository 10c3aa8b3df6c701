"""Fair share without per-tenant caps, live: a light tenant under a 10× flood of another at the
same priority, neither capped, through the gateway on the scripted server (4 slots, ~100 ms a
request). With the share rule (``queue.fair_share_s``, the default) light almost never waits
for a slot (slots kept for its 0.99 quantile of concurrency, one over the limit past its share)
and its P99 TTFT stays near its figure alone; with the rule off (fair queueing alone) nearly
every light request waits for one of the flood's to end. Side by side in one test,
generous margins (the figures: ``benchmarks/gateway_fair_share.py``)."""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
from harness import gateway_config, running, url

from servetune.gateway.keys import hash_key

LIGHT, FLOOD = "st-light-" + "l" * 40, "st-flood-" + "f" * 40
BODY = {"model": "scripted-model", "prompt": "the cat", "max_tokens": 16, "stream": True}


async def poisson(
    gw_url: str, key: str, rate: float, seconds: float, seed: int, ttfts: list[float] | None
) -> None:
    rng = random.Random(seed)
    async with aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=60), connector=aiohttp.TCPConnector(limit=0)
    ) as s:

        async def one() -> None:
            t0 = time.perf_counter()
            try:
                async with s.post(
                    gw_url, json=BODY, headers={"Authorization": f"Bearer {key}"}
                ) as r:
                    first = None
                    async for chunk in r.content.iter_any():
                        if first is None and b'"text"' in chunk:
                            first = time.perf_counter() - t0
                    if ttfts is not None and r.status == 200 and first is not None:
                        ttfts.append(first)
            except (aiohttp.ClientError, TimeoutError):
                pass

        tasks = []
        start = due = time.perf_counter()
        while (due := due + rng.expovariate(rate)) - start < seconds:
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            tasks.append(asyncio.create_task(one()))
        if ttfts is None:
            for t in tasks:
                t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def p99(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(0.99 * len(xs)))]


def measure(tmp: Path, port: int, fair_share_s: float) -> dict[str, Any]:
    cfg = gateway_config(
        tmp,
        groups=[{"name": "g", "urls": [f"http://127.0.0.1:{port}/v1"], "max_concurrency": 4,
                 "adaptive": False}],
        tenants=[{"name": "light", "keys": [hash_key(LIGHT)]},
                 {"name": "flood", "keys": [hash_key(FLOOD)]}],
        queue={"fair_share_s": fair_share_s, "max_queued_per_tenant": 128},
    )  # fmt: skip

    async def main() -> dict[str, Any]:
        async with running(cfg) as gw:
            u = url(gw)
            alone: list[float] = []
            await poisson(u, LIGHT, 5.0, 8.0, 1, alone)
            waits0 = gw.metrics.queue.get("light")
            n0 = waits0.n if waits0 else 0
            flood = asyncio.create_task(poisson(u, FLOOD, 50.0, 12.0, 2, None))
            await asyncio.sleep(2.0)
            under: list[float] = []
            await poisson(u, LIGHT, 5.0, 8.0, 3, under)
            await flood
            waits = gw.metrics.queue.get("light")
            return {
                "alone": alone,
                "under": under,
                "light_waited": (waits.n if waits else 0) - n0,
                "flood_waited": gw.metrics.queue["flood"].n,
            }

    return asyncio.run(main())


def test_a_light_tenant_keeps_its_ttft_under_an_uncapped_flood(
    scripted: Callable[..., Any], tmp_path: Path
) -> None:
    srv = scripted({"model": "scripted-model", "ttft_ms": 20, "tpot_ms": 5})
    before = measure(tmp_path / "before", srv.port, 0.0)
    after = measure(tmp_path / "after", srv.port, 10.0)
    summary = {
        k: {
            "p50_alone_ms": round(statistics.median(r["alone"]) * 1e3, 1),
            "p50_flooded_ms": round(statistics.median(r["under"]) * 1e3, 1),
            "p99_flooded_ms": round(p99(r["under"]) * 1e3, 1),
            "light_waited": r["light_waited"],
            "light_flooded": len(r["under"]),
        }
        for k, r in (("before", before), ("after", after))
    }
    # the mechanism, counted by the gateway itself (robust to a loaded box): before, light
    # waited for a slot in most of its flooded requests; with the share rule in few
    assert before["light_waited"] > 0.5 * len(before["under"]), summary
    # with the rule, light's arrivals find a slot kept (or go one over the limit) unless it
    # already has 3 running: 1.4 % of them at λS = 0.5 (the share rule of 7277f90, two kept
    # and no burst past its share, made 9 % wait: 2-9 of 36; the deterministic case is
    # tests/gateway/test_shares.py)
    assert after["light_waited"] <= 0.1 * len(after["under"]), summary
    assert after["flood_waited"] > 0, summary  # the flood was flooding (its queue was full)
    # the outcome, with a generous margin: this test's clients share one event loop with the
    # gateway on a busy 2-core box, so its P99 is the box's (the P99 ratio is the benchmark's,
    # benchmarks/gateway_fair_share.py); the flooded median must still be the better one
    assert statistics.median(after["under"]) < statistics.median(before["under"]), summary
