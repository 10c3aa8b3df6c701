"""The admin API end to end: who may call it, what each endpoint answers, and what it changes
(weights, rollouts, reload), with the audit log written for every change of the split."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
from harness import gateway_config, running, sim, url

from servetune.gateway.audit import read_audit
from servetune.gateway.config import load_config
from servetune.gateway.keys import hash_key, new_key

TIMEOUT = aiohttp.ClientTimeout(total=30)


def test_admin_api(tmp_path: Path) -> None:
    srv = sim()
    admin, user = new_key(), new_key()
    data: dict[str, Any] = {
        "listen": "127.0.0.1:0",
        "audit_log": str(tmp_path / "audit.jsonl"),
        "admin_keys": [hash_key(admin)],
        "tenants": [{"name": "team-a", "keys": [hash_key(user)]}],
        "groups": [
            {"name": "baseline", "urls": [srv.base_url]},
            {"name": "candidate", "urls": [srv.base_url], "weight": 0},
        ],
        "canary": {"min_requests": 1000, "max_step_s": 600},
    }
    path = tmp_path / "gateway.json"
    path.write_text(json.dumps(data))
    try:

        async def main() -> None:
            async with (
                running(load_config(path), str(path)) as gw,
                aiohttp.ClientSession(timeout=TIMEOUT) as s,
            ):

                async def call(
                    method: str, where: str, key: str | None = admin, body: Any = None
                ) -> tuple[int, Any]:
                    headers = {"Authorization": f"Bearer {key}"} if key else {}
                    async with s.request(method, url(gw, where), json=body, headers=headers) as r:
                        return r.status, await r.json(content_type=None)

                # who may call: no key 401, a tenant's key 403, an admin key 200
                status, body = await call("GET", "/admin/state", key=None)
                assert status == 401 and body["error"]["code"] == "admin_only"
                status, body = await call("GET", "/admin/state", key=user)
                assert status == 403 and "admin key" in body["error"]["message"]
                status, state = await call("GET", "/admin/state")
                assert status == 200
                assert state["weights"] == {"baseline": 100.0, "candidate": 0.0}
                assert state["auth"] is True and state["tenants"] == ["team-a"]
                assert state["groups"]["baseline"]["upstreams"][0]["url"] == srv.base_url
                assert state["rollout"] is None and state["store"] == "memory"

                # weights: refused when malformed, unknown or all zero; applied and audited
                for bad in ({"weights": {"baseline": -1}}, {"weights": {"nope": 1}},
                            {"weights": {"baseline": 0}}, [1, 2]):  # fmt: skip
                    status, body = await call("POST", "/admin/weights", body=bad)
                    assert status == 400, bad
                status, body = await call(
                    "POST", "/admin/weights", body={"weights": {"candidate": 1}}
                )
                assert status == 200 and body["weights"] == {"baseline": 100.0, "candidate": 1.0}
                assert gw.router.weights == {"baseline": 100.0, "candidate": 1.0}
                entry = read_audit(tmp_path / "audit.jsonl")[-1]
                assert entry["action"] == "weights"
                assert entry["old_weights"] == {"baseline": 100.0, "candidate": 0.0}
                assert entry["new_weights"] == {"baseline": 100.0, "candidate": 1.0}
                assert entry["config"] == gw.config_id
                await call("POST", "/admin/weights", body={"weights": {"candidate": 0}})

                # rollouts: none yet; refused bodies; start, conflict, abort
                status, _ = await call("GET", "/admin/rollout")
                assert status == 404
                status, _ = await call("DELETE", "/admin/rollout")
                assert status == 409
                status, _ = await call("POST", "/admin/rollout", body={"steps": [5]})
                assert status == 400
                status, body = await call("POST", "/admin/rollout", body={"candidate": "x"})
                assert status == 409 and "no upstream group named 'x'" in body["error"]["message"]
                status, body = await call(
                    "POST", "/admin/rollout", body={"candidate": "candidate", "steps": [10, 50]}
                )
                assert status == 202 and body["steps"] == [10.0, 50.0, 100.0]
                for _ in range(100):  # the first step sets the weights
                    if gw.router.weights.get("candidate") == 10.0:
                        break
                    await asyncio.sleep(0.05)
                assert gw.router.weights == {"baseline": 90.0, "candidate": 10.0}
                status, body = await call("POST", "/admin/rollout", body={"candidate": "candidate"})
                assert status == 409 and "already running" in body["error"]["message"]
                status, body = await call(
                    "POST", "/admin/weights", body={"weights": {"candidate": 1}}
                )
                assert status == 409 and "abort it first" in body["error"]["message"]
                status, body = await call("GET", "/admin/rollout")
                assert status == 200 and body["status"] == "running" and body["step_index"] == 0
                status, body = await call("DELETE", "/admin/rollout")
                assert status == 200 and body["status"] == "aborted"
                assert gw.router.weights == {"baseline": 100.0, "candidate": 0.0}
                status, body = await call("GET", "/admin/state")
                assert body["rollout"]["status"] == "aborted"
                actions = [e["action"] for e in read_audit(tmp_path / "audit.jsonl")]
                assert actions[-3:] == ["rollout_start", "step", "abort"]

                # reload: the file re-read (the weights the file gives)
                data["groups"][1]["weight"] = 2
                path.write_text(json.dumps(data))
                status, body = await call("POST", "/admin/reload")
                assert status == 200 and body["reloaded"] is True
                assert body["config"] == gw.config_id
                assert gw.router.weights == {"baseline": 100.0, "candidate": 2.0}
                path.write_text("{not json")
                status, body = await call("POST", "/admin/reload")
                assert status == 409 and body["reloaded"] is False
                assert gw.router.weights == {"baseline": 100.0, "candidate": 2.0}

        asyncio.run(main())
    finally:
        srv.stop()


def test_admin_api_off_without_admin_keys(tmp_path: Path) -> None:
    srv = sim()
    try:

        async def main() -> None:
            cfg = gateway_config(tmp_path, groups=[{"name": "g", "urls": [srv.base_url]}])
            async with running(cfg) as gw, aiohttp.ClientSession(timeout=TIMEOUT) as s:
                async with s.get(url(gw, "/admin/state")) as r:
                    assert r.status == 401
                    body = await r.json()
                assert "admin API is off" in body["error"]["message"]
                async with s.post(
                    url(gw, "/admin/reload"), headers={"Authorization": f"Bearer {new_key()}"}
                ) as r:
                    assert r.status == 403

        asyncio.run(main())
    finally:
        srv.stop()
