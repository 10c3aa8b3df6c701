"""Authentication cannot be switched off by a configuration or a reload, and each anonymous
key is a tenant of its own (issue 25, points 2 and 6)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from harness import client, complete, gateway_config, running, sim

from servetune.errors import ConfigError
from servetune.gateway.app import Gateway
from servetune.gateway.audit import read_audit
from servetune.gateway.keys import hash_key, new_key
from servetune.gateway.tenants import build_callers

URL = "http://127.0.0.1:9/v1"


def test_admin_keys_without_tenant_keys_are_refused(tmp_path: Path) -> None:
    """Before: the gateway ran open, everyone the tenant 'default' without limits."""
    cfg = gateway_config(
        tmp_path, groups=[{"name": "g", "urls": [URL]}], admin_keys=[hash_key(new_key())]
    )
    with pytest.raises(ConfigError, match="no tenant key") as exc:
        Gateway(cfg)
    assert "auth: off" in (exc.value.hint or "")
    # `auth: off` makes the open gateway an explicit choice
    cfg = gateway_config(
        tmp_path,
        groups=[{"name": "g", "urls": [URL]}],
        admin_keys=[hash_key(new_key())],
        auth="off",
    )
    assert not build_callers(cfg).auth
    # `auth: keys` refuses a configuration without tenant keys; `auth: off` refuses keys
    with pytest.raises(ConfigError, match="no tenant key"):
        build_callers(gateway_config(tmp_path, groups=[{"name": "g", "urls": [URL]}], auth="keys"))
    with pytest.raises(ConfigError, match="auth: off, but 1 tenant key"):
        build_callers(
            gateway_config(
                tmp_path,
                groups=[{"name": "g", "urls": [URL]}],
                tenants=[{"name": "t", "keys": [hash_key(new_key())]}],
                auth="off",
            )
        )


def test_a_reload_that_drops_the_last_tenant_key_is_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    engine = sim()
    key, admin = new_key(), new_key()
    path = tmp_path / "gateway.yaml"
    audit = tmp_path / "audit.jsonl"

    def write(tenant_keys: list[str], admins: list[str], extra: str = "") -> None:
        tenants = ""
        if tenant_keys:
            tenants = f"tenants:\n  - name: t\n    keys: [{', '.join(tenant_keys)}]\n"
        path.write_text(
            f"groups:\n  - name: g\n    urls: [{engine.base_url}]\naudit_log: {audit}\n"
            f"admin_keys: [{', '.join(admins)}]\n{tenants}{extra}"
        )

    async def main() -> None:
        write([hash_key(key)], [hash_key(admin)])
        gw = Gateway(gateway_config(tmp_path, groups=[{"name": "g", "urls": [engine.base_url]}],
                                    admin_keys=[hash_key(admin)],
                                    tenants=[{"name": "t", "keys": [hash_key(key)]}]),
                     str(path))  # fmt: skip
        await gw.start()
        try:
            async with client() as s:
                # the last tenant key removed, admin keys kept: refused (before: everyone was
                # served as 'default' and the log said only "configuration reloaded")
                write([], [hash_key(admin)])
                assert not await gw.reload()
                assert gw.auth
                assert (await complete(s, gw, key=None))[0] == 401
                # every key removed: still refused — a reload cannot open the gateway
                write([], [])
                assert not await gw.reload()
                assert (await complete(s, gw, key=None))[0] == 401
                assert (await complete(s, gw, key=key))[0] == 200
                # a tenant added, with two keys: the log and the audit say what changed
                caplog.clear()
                with caplog.at_level(logging.INFO, "servetune.gateway"):
                    write([hash_key(key)], [hash_key(admin)],
                          f"key_files: [{tmp_path / 'k.txt'}]\n")  # fmt: skip
                    (tmp_path / "k.txt").write_text(f"{new_key()} u\n{new_key()} u\n")
                    assert await gw.reload()
                line = next(r.getMessage() for r in caplog.records if "reloaded" in r.getMessage())
                assert "tenants added ['u']" in line and "tenant keys 1 -> 3" in line, line
                # `auth: off` said explicitly: accepted, and said loudly
                caplog.clear()
                with caplog.at_level(logging.INFO, "servetune.gateway"):
                    write([], [hash_key(admin)], "auth: off\n")
                    assert await gw.reload()
                assert not gw.auth
                warned = [r for r in caplog.records if r.levelno == logging.WARNING]
                assert any("authentication OFF" in r.getMessage() for r in warned)
        finally:
            await gw.stop(1.0)
            engine.stop()
        entries = read_audit(audit)
        refused = [e for e in entries if e["action"] == "reload_refused"]
        assert len(refused) == 2 and "no tenant key" in refused[0]["reason"]
        done = [e for e in entries if e["action"] == "reload"]
        assert done[0]["auth"]["tenants_added"] == ["u"]
        assert done[1]["auth"]["auth"] == [True, False]

    asyncio.run(main())


def test_anonymous_keys_in_two_files_are_two_tenants(tmp_path: Path) -> None:
    """Before: the first line of each file was tenant 'key1' — two customers, one quota."""
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    ka, kb = new_key(), new_key()
    a.write_text(f"{ka}\n")
    b.write_text(f"{kb}\n")
    cfg = gateway_config(
        tmp_path, groups=[{"name": "g", "urls": [URL]}], key_files=[str(a), str(b)],
        defaults={"tpm": 1000},
    )  # fmt: skip
    callers = build_callers(cfg)
    ea, eb = callers.keys.lookup(ka), callers.keys.lookup(kb)
    assert ea is not None and eb is not None
    assert ea.tenant != eb.tenant and {ea.tenant, eb.tenant} <= set(callers.tenants)
    # stable across a reload: the name comes from the key, not from its line
    assert build_callers(cfg).keys.lookup(ka).tenant == ea.tenant  # type: ignore[union-attr]
    # the same anonymous key twice: refused, with the place
    b.write_text(f"{kb}\n{ka}\n")
    with pytest.raises(ConfigError, match=r"b.txt:2: the anonymous key's tenant"):
        build_callers(cfg)
    # a key file that names its tenant joins it, on purpose
    b.write_text(f"{kb} shared\n{new_key()} shared\n")
    assert len({e.tenant for e in [build_callers(cfg).keys.lookup(kb)] if e}) == 1


def test_metrics_need_an_admin_or_metrics_key(tmp_path: Path) -> None:
    """Before: /metrics answered anyone with every tenant, its token use and the upstream
    URLs — what /admin/state keeps behind the admin key."""
    engine = sim()
    tenant, admin, scraper = new_key(), new_key(), new_key()

    async def get(gw: Gateway, key: str | None) -> tuple[int, str]:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        async with (
            client() as s,
            s.get(f"http://127.0.0.1:{gw.port}/metrics", headers=headers) as r,
        ):
            return r.status, await r.text()

    async def main() -> None:
        groups = [{"name": "g", "urls": [engine.base_url]}]
        cfg = gateway_config(
            tmp_path, groups=groups, tenants=[{"name": "acme", "keys": [hash_key(tenant)]}],
            admin_keys=[hash_key(admin)], metrics_keys=[hash_key(scraper)],
        )  # fmt: skip
        async with running(cfg) as gw:
            async with client() as s:
                assert (await complete(s, gw, key=tenant))[0] == 200
            status, text = await get(gw, None)
            assert status == 401 and "acme" not in text and engine.base_url not in text
            assert (await get(gw, tenant))[0] == 403
            for key in (scraper, admin):
                status, text = await get(gw, key)
                assert status == 200 and 'tenant="acme"' in text
        # an open gateway with no key to give: refused, saying how to open it
        async with running(gateway_config(tmp_path, groups=groups)) as gw:
            status, text = await get(gw, None)
            assert status == 401 and "metrics_open" in text
        async with running(gateway_config(tmp_path, groups=groups, metrics_open=True)) as gw:
            assert (await get(gw, None))[0] == 200

    try:
        asyncio.run(main())
    finally:
        engine.stop()
