"""Routing policies in the gateway, against simulated engines: two gateway replicas that share
nothing route one session to the same upstream; a session's affinity survives its upstream's
failure (moved to its next choice, audited); the choices are in /metrics."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from harness import MODEL, client, gateway_config, running, sim, url

from servetune.gateway.app import Gateway
from servetune.gateway.audit import read_audit

SYSTEM = "You are a helpful assistant who answers in full sentences. " * 8


async def chat(s: aiohttp.ClientSession, gw: Gateway, session: str, turn: int, how: str) -> int:
    messages = [{"role": "system", "content": SYSTEM}]
    for k in range(turn):
        messages.append({"role": "user", "content": f"question {k} about the topic at hand"})
        messages.append({"role": "assistant", "content": f"answer {k} " * 12})
    messages.append({"role": "user", "content": f"question {turn}"})
    body: dict[str, Any] = {"model": MODEL, "messages": messages, "max_tokens": 4, "stream": True}
    headers = {}
    if how == "header":
        headers["X-Session-ID"] = session
    else:
        body["user"] = session
    async with s.post(url(gw, "/v1/chat/completions"), json=body, headers=headers) as r:
        await r.read()
        return r.status


def served(gw: Gateway) -> dict[str, int]:
    out: dict[str, int] = {}
    for (up, _reason), n in gw.pools["g"].routes.items():
        out[up] = out.get(up, 0) + n
    return out


@pytest.mark.parametrize(("policy", "how"), [("session", "header"), ("score", "user")])
def test_two_gateway_replicas_route_one_session_alike(
    tmp_path: Path, policy: str, how: str
) -> None:
    engines = [sim() for _ in range(3)]
    try:
        urls = [e.base_url for e in engines]

        async def main() -> None:
            cfgs = [
                gateway_config(
                    tmp_path / name,
                    groups=[{"name": "g", "urls": urls, "routing": {"policy": policy}}],
                    metrics_interval_s=0.2,
                )
                for name in ("a", "b")
            ]
            async with running(cfgs[0]) as a, running(cfgs[1]) as b, client() as s:
                # other sessions first, through one replica only: their histories differ
                for k in range(6):
                    assert await chat(s, a, f"warm-{k}", 1, how) == 200
                before_a, before_b = served(a), served(b)
                for turn in range(6):
                    via = a if turn % 2 == 0 else b
                    assert await chat(s, via, "the-session", turn, how) == 200
                ups = {u for gw, before in ((a, before_a), (b, before_b))
                       for u, n in served(gw).items() if n > before.get(u, 0)}  # fmt: skip
                assert len(ups) == 1, (served(a), served(b))

        asyncio.run(main())
    finally:
        for e in engines:
            e.stop()


def test_session_affinity_survives_its_upstreams_failure(tmp_path: Path) -> None:
    engines = [sim() for _ in range(3)]
    try:
        urls = [e.base_url for e in engines]

        async def main() -> None:
            cfg = gateway_config(
                tmp_path,
                groups=[{"name": "g", "urls": urls, "routing": {"policy": "session"}}],
                breaker={"failures": 1, "cooldown_s": 60},
                metrics_open=True,
            )
            async with running(cfg) as gw, client() as s:
                for turn in range(3):
                    assert await chat(s, gw, "sticky", turn, "header") == 200
                (home,) = served(gw)
                engines[urls.index(home)].stop()  # its engine dies
                before = served(gw)
                for turn in range(3, 9):
                    assert await chat(s, gw, "sticky", turn, "header") == 200
                after = {u: n - before.get(u, 0) for u, n in served(gw).items()}
                new_home = [u for u, n in after.items() if n and u != home]
                assert len(new_home) == 1, after  # moved once, and stays together
                routes = gw.pools["g"].routes
                assert routes.get((new_home[0], "rebalanced"), 0) >= 5
                async with s.get(url(gw, "/metrics")) as r:
                    text = await r.text()
                assert 'route_decisions_total{group="g",policy="session"' in text
                assert 'reason="rebalanced"' in text

                async def audited() -> bool:
                    rows = read_audit(tmp_path / "audit.jsonl")
                    return any(
                        e["action"] == "route_rebalanced" and e["upstream"] == home for e in rows
                    )

                for _ in range(100):
                    if await audited():
                        break
                    await asyncio.sleep(0.05)
                actions = [e["action"] for e in read_audit(tmp_path / "audit.jsonl")]
                assert actions[0] == "routing" and "route_rebalanced" in actions

        asyncio.run(main())
    finally:
        for e in engines:
            e.stop()
