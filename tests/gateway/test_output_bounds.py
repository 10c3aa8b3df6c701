"""Every field that bounds a request's output is normalised to one value that is capped,
reserved and forwarded: the engine never sees a bound the gateway did not charge.

Issue 25, point 1: a chat request with ``max_tokens: 5, max_completion_tokens: 1200`` was
reserved 5 and forwarded both; the simulated engine (like vLLM) generates
``max_completion_tokens`` — 1,200 tokens past a cap of 256, 10× a tenant's tpm quota.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from harness import MODEL, client, engine_metric, gateway_config, running, sim, url
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servetune.gateway.keys import hash_key, new_key
from servetune.sim.embedded import EmbeddedServer

CAP = 12
GENERATED = "vllm:generation_tokens_total"
PROMPTED = "vllm:prompt_tokens_total"


@pytest.fixture(scope="module")
def engine() -> Iterator[EmbeddedServer]:
    srv = sim()
    yield srv
    srv.stop()


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hi there"}], **fields}


def test_max_completion_tokens_cannot_pass_the_cap(engine: EmbeddedServer, tmp_path: Path) -> None:
    """The request of the issue: before, the engine made 1,200 tokens past a cap of 256."""

    async def main() -> None:
        cfg = gateway_config(
            tmp_path,
            groups=[{"name": "g", "urls": [engine.base_url]}],
            defaults={"max_tokens": 256},
        )
        async with running(cfg) as gw, client() as s:
            body = chat(max_tokens=5, max_completion_tokens=1200, ignore_eos=True)
            async with s.post(url(gw, "/v1/chat/completions"), json=body) as r:
                out = await r.json()
                assert r.status == 200, out
            assert out["usage"]["completion_tokens"] <= 5, out["usage"]
            # over the cap on its own: clamped, said so
            body = chat(max_completion_tokens=1200, ignore_eos=True)
            async with s.post(url(gw, "/v1/chat/completions"), json=body) as r:
                out = await r.json()
                assert r.headers.get("x-servetune-max-tokens-clamped") == "256"
            assert out["usage"]["completion_tokens"] <= 256, out["usage"]

    asyncio.run(main())


def test_max_completion_tokens_cannot_pass_the_quota(
    engine: EmbeddedServer, tmp_path: Path
) -> None:
    """A tpm quota of 2,000: the engine makes at most what the bucket held (2,000 plus the
    refill over the test's seconds), whatever the request says in max_completion_tokens."""
    tpm = 2000

    async def main() -> float:
        cfg = gateway_config(
            tmp_path, groups=[{"name": "g", "urls": [engine.base_url]}], defaults={"tpm": tpm}
        )
        async with running(cfg) as gw, client() as s:
            before = await engine_metric(engine, GENERATED) + await engine_metric(engine, PROMPTED)
            t0 = time.monotonic()

            async def one() -> int:
                body = chat(max_tokens=5, max_completion_tokens=1200, ignore_eos=True)
                async with s.post(url(gw, "/v1/chat/completions"), json=body) as r:
                    await r.read()
                    return r.status

            await asyncio.gather(*(one() for _ in range(40)))
            elapsed = time.monotonic() - t0
            after = await engine_metric(engine, GENERATED) + await engine_metric(engine, PROMPTED)
        served = after - before
        assert served <= tpm * (1 + elapsed / 60), (served, elapsed)
        return served

    asyncio.run(main())


# -- the property: every combination of the fields that bound output ----------------------------

LENGTHS = ("max_tokens", "max_completion_tokens", "max_new_tokens", "n_predict")
bound_fields = st.fixed_dictionaries(
    {},
    optional={
        **{name: st.integers(1, 40) for name in LENGTHS},
        "n": st.integers(1, 3),
        "best_of": st.integers(1, 3),
        "min_tokens": st.integers(0, 40),
    },
)


def served_tokens(raw: bytes, stream: bool) -> int:
    """Output tokens the client got, from the engine's usage (asked for on streams)."""
    if not stream:
        return int(orjson.loads(raw)["usage"]["completion_tokens"])
    for line in raw.split(b"\n\n"):
        if b'"usage"' in line and line.startswith(b"data: {"):
            u = orjson.loads(line[6:]).get("usage")
            if u:
                return int(u["completion_tokens"])
    raise AssertionError(f"no usage in the stream: {raw[-300:]!r}")


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    fields=bound_fields,
    endpoint=st.sampled_from(["/v1/chat/completions", "/v1/completions"]),
    stream=st.booleans(),
    policy=st.sampled_from(["clamp", "refuse"]),
)
def test_every_combination_of_output_bounds_stays_under_the_cap_and_the_reservation(
    engine: EmbeddedServer,
    tmp_path: Path,
    fields: dict[str, int],
    endpoint: str,
    stream: bool,
    policy: str,
) -> None:
    key = new_key()
    tpm = 10_000

    async def main() -> None:
        cfg = gateway_config(
            tmp_path,
            groups=[{"name": "g", "urls": [engine.base_url]}],
            tenants=[
                {"name": "t", "keys": [hash_key(key)], "max_tokens": CAP, "tpm": tpm,
                 "max_tokens_policy": policy}
            ],
        )  # fmt: skip
        async with running(cfg) as gw, client() as s:
            body: dict[str, Any] = {"model": MODEL, "stream": stream, "ignore_eos": True, **fields}
            if stream:
                body["stream_options"] = {"include_usage": True}
            if endpoint == "/v1/completions":
                body["prompt"] = "hi there"
            else:
                body["messages"] = [{"role": "user", "content": "hi there"}]
            before = await engine_metric(engine, GENERATED)
            headers = {"Authorization": f"Bearer {key}"}
            async with s.post(url(gw, endpoint), json=body, headers=headers) as r:
                raw = await r.read()
                status = r.status
            made = await engine_metric(engine, GENERATED) - before
            choices = max(fields.get("n", 1), fields.get("best_of", 1))
            if status == 400:
                assert made == 0
                return
            assert status == 200, raw
            got = served_tokens(raw, stream)
            # the cap holds per sequence, the reservation for all of them: the engine made no
            # more than the gateway charged, and the client got no more than the cap allows
            assert got <= CAP * choices, (fields, got)
            assert made <= CAP * choices, (fields, made)
            asked = [fields[f] for f in LENGTHS if f in fields]
            if asked:
                assert got <= min(asked) * choices, (fields, got)
            t = gw.tenants["t"]
            assert gw.store.inflight("t") == 0  # type: ignore[attr-defined]
            assert t.quota.tpm == tpm

    asyncio.run(main())
