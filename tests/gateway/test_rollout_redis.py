"""A rollout across two gateway replicas sharing Redis: both route by the shared weights, both
push what they measure, the replica that started the rollout decides, the other follows."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest
from harness import MODEL, client, gateway_config, running, sim, stop_tasks, url, wait_until
from redis_server import RedisServer

from servetune.gateway.app import Gateway
from servetune.gateway.keys import hash_key, new_key

PROMPT = " ".join(["the"] * 100)
DECISION_S = 200.0
"""The rollout decides within max_step_s (90 s) and a tick; this is the margin for a loaded box."""

# At worst the test fails with a message (and pytest-timeout's stack dump), never hangs: every
# wait below is bounded, and this bounds their sum (setup ~5 s, decision <= 200 s, teardown).
pytestmark = pytest.mark.timeout(360)


def test_rollout_shared_by_two_replicas(redis_server: RedisServer, tmp_path: Path) -> None:
    base, cand = sim(), sim(max_num_seqs=1)
    admin = new_key()
    try:

        async def main() -> None:
            def cfg(name: str):  # type: ignore[no-untyped-def]
                (tmp_path / name).mkdir()
                return gateway_config(
                    tmp_path / name,
                    redis=redis_server.url,
                    redis_prefix="rollout-test:",
                    admin_keys=[hash_key(admin)],
                    auth="off",  # an open data path on purpose: the test drives the admin API
                    groups=[{"name": "baseline", "urls": [base.base_url]},
                            {"name": "candidate", "urls": [cand.base_url], "weight": 0}],
                    canary={"min_requests": 30, "min_batches": 6, "batch_size": 3,
                            "tolerance": 0.2, "max_step_s": 90},
                )  # fmt: skip

            async with running(cfg("a")) as a, running(cfg("b")) as b:
                stop = asyncio.Event()
                seen_by: dict[str, set[str]] = {"a": set(), "b": set()}

                async def worker(gw_url: str, who: str, s: aiohttp.ClientSession) -> None:
                    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 10, "stream": True}
                    while not stop.is_set():
                        async with s.post(gw_url, json=body) as r:
                            await r.read()
                            seen_by[who].add(r.headers.get("x-servetune-group", "?"))

                async with client() as s:
                    load = [asyncio.create_task(worker(url(gw), who, s))
                            for gw, who in ((a, "a"), (b, "b")) for _ in range(4)]  # fmt: skip
                    try:
                        async with s.post(
                            url(a, "/admin/rollout"),
                            json={"candidate": "candidate", "steps": [30, 100]},
                            headers={"Authorization": f"Bearer {admin}"},
                        ) as r:
                            assert r.status == 202, await r.text()

                        async def decided(gw: Gateway) -> bool:
                            st = gw.rollouts.state
                            return st is not None and st.done

                        async def followed() -> bool:  # b's sync: every 0.5 s
                            return await decided(b) and b.router.weights == a.router.weights

                        await wait_until(lambda: decided(a), DECISION_S, "a decides")
                        await wait_until(followed, 20, "b follows a's state and weights")
                    finally:
                        stop.set()
                        await stop_tasks(load, 30)
                assert a.rollouts.state is not None and a.rollouts.state.status == "rolled_back"
                assert b.rollouts.state is not None and b.rollouts.state.status == "rolled_back"
                assert b.router.weights == {"baseline": 100.0, "candidate": 0.0}
                assert "candidate" in seen_by["b"]  # b routed by the shared canary weights
                ev = a.rollouts.state.evidence or {}
                # observations came from both replicas: more than a's own candidate requests
                assert ev["candidate"]["requests"] >= 30  # type: ignore[index]

        asyncio.run(main())
    finally:
        base.stop()
        cand.stop()
