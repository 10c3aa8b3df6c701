"""SIGHUP re-reads gateway.yaml without dropping the streams in flight."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from harness import MODEL, client, sim
from test_replicas_redis import start_gateway, stop

from servetune.gateway.audit import read_audit
from servetune.gateway.keys import hash_key, new_key


def test_sighup_reload_keeps_streams(tmp_path: Path) -> None:
    engine = sim()
    old_key, new = new_key(), new_key()
    cfg = tmp_path / "gateway.yaml"

    def write(keys: list[str]) -> None:
        cfg.write_text(
            f"groups:\n  - name: g\n    urls: [{engine.base_url}]\n"
            f"tenants:\n  - name: t\n    keys: [{', '.join(hash_key(k) for k in keys)}]\n"
        )

    write([old_key])
    proc, port = start_gateway(["--config", str(cfg)], tmp_path)
    try:

        async def main() -> None:
            async with client() as s:
                base = f"http://127.0.0.1:{port}/v1/completions"
                body = {"model": MODEL, "prompt": "x y z", "max_tokens": 400, "stream": True}

                streaming = asyncio.Event()

                async def call(key: str, b: dict[str, object]) -> tuple[int, bytes]:
                    async with s.post(
                        base, json=b, headers={"Authorization": f"Bearer {key}"}
                    ) as r:
                        first = await r.content.readany()
                        streaming.set()
                        return r.status, first + await r.read()

                assert (await call(new, {**body, "max_tokens": 2}))[0] == 401
                streaming.clear()
                long = asyncio.create_task(call(old_key, body))
                # streaming now (its first bytes are here), under the old key; not a fixed
                # sleep: on a loaded box the request may not have reached the gateway yet
                await asyncio.wait_for(streaming.wait(), 60)
                write([new])  # the old key is gone from the new configuration
                proc.send_signal(signal.SIGHUP)
                loop = asyncio.get_running_loop()
                deadline = loop.time() + 30
                while (await call(new, {**body, "max_tokens": 2}))[0] != 200:
                    assert loop.time() < deadline, "the new key never worked: no reload"
                    await asyncio.sleep(0.1)
                assert (await call(old_key, {**body, "max_tokens": 2}))[0] == 401
                status, data = await long
                assert status == 200 and data.rstrip().endswith(b"data: [DONE]")
                assert data.count(b'"text"') == 400  # the whole stream, uncut

        asyncio.run(main())
    finally:
        stop(proc)
        engine.stop()
    assert [a["action"] for a in read_audit(tmp_path / "audit.jsonl")] == ["reload"]


def test_invalid_reload_keeps_the_running_configuration(tmp_path: Path) -> None:
    engine = sim()
    key = new_key()
    cfg = tmp_path / "gateway.yaml"
    cfg.write_text(
        f"groups:\n  - name: g\n    urls: [{engine.base_url}]\n"
        f"tenants:\n  - name: t\n    keys: [{hash_key(key)}]\n"
    )
    proc, port = start_gateway(["--config", str(cfg)], tmp_path)
    try:
        cfg.write_text("groups: [\n")
        proc.send_signal(signal.SIGHUP)

        def refused() -> bool:
            audit = tmp_path / "audit.jsonl"
            try:
                return any(a["action"] == "reload_refused" for a in read_audit(audit))
            except (FileNotFoundError, ValueError):  # not written yet, or a line half-written
                return False

        async def main() -> int:
            # the refusal is on record (not a fixed sleep, which a loaded box can outlast):
            # the request below is served by the configuration that was kept
            deadline = asyncio.get_running_loop().time() + 30
            while not refused():
                assert asyncio.get_running_loop().time() < deadline, "no reload_refused"
                await asyncio.sleep(0.1)
            async with client() as s:
                body = {"model": MODEL, "prompt": "x", "max_tokens": 2}
                async with s.post(f"http://127.0.0.1:{port}/v1/completions", json=body,
                                  headers={"Authorization": f"Bearer {key}"}) as r:  # fmt: skip
                    return r.status

        assert asyncio.run(main()) == 200
    finally:
        stop(proc)
        engine.stop()
    rows = read_audit(tmp_path / "audit.jsonl")
    assert rows[-1]["action"] == "reload_refused" and "YAML" in rows[-1]["reason"]


def test_a_reload_refused_late_changes_nothing_that_runs(tmp_path: Path) -> None:
    """A configuration that passes the checks but fails while being applied (a tokenizer or a
    sweep that cannot be read) is refused as a whole: the live upstream keeps its admission
    limit and circuit threshold (they were changed first, then the refusal said "kept"), and
    a gateway without keys stays open (auth was switched before the groups were checked)."""
    from servetune.gateway.app import Gateway
    from servetune.gateway.config import load_config

    cfg = tmp_path / "gateway.yaml"
    group = "groups:\n  - name: g\n    urls: [http://127.0.0.1:9/v1]\n    adaptive: false\n"
    cfg.write_text(
        group + "    max_concurrency: 4\nbreaker: {failures: 5}\n"
        f"audit_log: {tmp_path / 'audit.jsonl'}\nlisten: 127.0.0.1:0\n"
    )

    async def main() -> None:
        gw = Gateway(load_config(str(cfg)), str(cfg))
        await gw.start()
        try:
            u = gw.pools["g"].upstreams[0]
            assert (u.limit, u.breaker.threshold) == (4, 5)
            assert not gw.auth and set(gw.tenants) == {"default"}
            cfg.write_text(
                group + f"    max_concurrency: 1\n    tokenizer: {tmp_path / 'none'}\n"
                f"breaker: {{failures: 1}}\naudit_log: {tmp_path / 'audit.jsonl'}\n"
                f"tenants:\n  - name: t\n    keys: [{hash_key(new_key())}]\n"
            )
            assert not await gw.reload()
            assert (u.limit, u.breaker.threshold) == (4, 5)
            # the refused keys switched nothing on
            assert not gw.auth and set(gw.tenants) == {"default"}
            assert gw.pools["g"].upstreams[0] is u
        finally:
            await gw.stop(drain_s=1.0)

    asyncio.run(main())
    rows = read_audit(tmp_path / "audit.jsonl")
    assert rows[-1]["action"] == "reload_refused" and "no tokenizer" in rows[-1]["reason"]
