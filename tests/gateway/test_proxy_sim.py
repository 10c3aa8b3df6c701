"""The gateway in front of the simulated engine: streaming, caps, exact quotas, fairness,
disconnects, bad bodies."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from harness import (
    MODEL,
    client,
    complete,
    engine_metric,
    gateway_config,
    running,
    sim,
    url,
    wait_until,
)

from servetune.gateway.app import Gateway
from servetune.gateway.keys import hash_key, new_key
from servetune.gateway.quota import MemoryQuota
from servetune.gateway.requests import InputCounter, parse_body
from servetune.sim.embedded import EmbeddedServer

PROMPT = "the cat sat on the mat"


@pytest.fixture(scope="module")
def engine() -> Iterator[EmbeddedServer]:
    srv = sim()
    yield srv
    srv.stop()


def prompt_tokens(prompt: str = PROMPT) -> int:
    body = orjson.dumps({"model": MODEL, "prompt": prompt})
    return InputCounter().count(parse_body(body, "completions"))


def test_streams_pass_through_with_usage_stripped(engine: EmbeddedServer, tmp_path: Path) -> None:
    async def main() -> None:
        cfg = gateway_config(
            tmp_path, groups=[{"name": "g", "urls": [engine.base_url]}], metrics_open=True
        )
        async with running(cfg) as gw, client() as s:
            status, body, headers = await complete(s, gw, max_tokens=20)
            assert status == 200 and headers["X-Accel-Buffering"] == "no"
            events = [e for e in body.split(b"\n\n") if e.startswith(b"data:")]
            assert events[-1] == b"data: [DONE]"
            assert b'"usage"' not in body  # not asked for: the gateway's own request removed
            assert sum(b'"text"' in e for e in events) == 20
            status, body, _ = await complete(
                s, gw, max_tokens=5, stream_options={"include_usage": True}
            )
            assert b'"completion_tokens":5' in body  # asked for: passed through
            status, body, _ = await complete(s, gw, max_tokens=5, stream=False)
            assert status == 200 and orjson.loads(body)["usage"]["completion_tokens"] == 5
            async with s.get(url(gw, "/metrics")) as r:
                text = await r.text()
            assert 'servetune_gateway_tokens_total{tenant="default",kind="completion"} 30' in text
            assert "servetune_gateway_ttft_seconds_bucket" in text
            # the two streams have a TPOT; the whole answer none (not ~2 µs: its tokens came
            # together, and the gap between two stamps in the gateway is no time per token)
            assert 'servetune_gateway_tpot_seconds_count{tenant="default",group="g"} 2' in text

    asyncio.run(main())


def test_tokens_arrive_as_they_are_generated(engine: EmbeddedServer, tmp_path: Path) -> None:
    """No buffering: the first token reaches the client long before the last is made."""

    async def main() -> None:
        cfg = gateway_config(tmp_path, groups=[{"name": "g", "urls": [engine.base_url]}])
        async with running(cfg) as gw, client() as s:
            body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 200, "stream": True}
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            first = last = 0.0
            async with s.post(url(gw), json=body) as r:
                async for _chunk in r.content.iter_any():
                    last = loop.time() - t0
                    first = first or last
            assert last > 0.5 and first < last / 4, (first, last)

    asyncio.run(main())


def test_keys_caps_and_clamping(engine: EmbeddedServer, tmp_path: Path) -> None:
    key_a, key_b = new_key(), new_key()

    async def main() -> None:
        cfg = gateway_config(
            tmp_path,
            groups=[{"name": "g", "urls": [engine.base_url]}],
            tenants=[
                {"name": "a", "keys": [hash_key(key_a)], "max_tokens": 10, "max_input_tokens": 20},
                {"name": "b", "keys": [hash_key(key_b)], "max_tokens": 10,
                 "max_tokens_policy": "refuse"},
            ],
        )  # fmt: skip
        async with running(cfg) as gw, client() as s:
            status, body, _ = await complete(s, gw, key=None)
            assert status == 401 and b"missing API key" in body
            status, body, _ = await complete(s, gw, key="st-" + "x" * 40)
            assert status == 401 and b"invalid API key" in body
            status, body, headers = await complete(s, gw, key=key_a, max_tokens=500, stream=False)
            assert status == 200 and orjson.loads(body)["usage"]["completion_tokens"] == 10
            assert headers["x-servetune-max-tokens-clamped"] == "10"
            status, body, _ = await complete(s, gw, key=key_b, max_tokens=500)
            assert status == 400 and b"over this key's cap" in body
            status, body, _ = await complete(s, gw, key=key_a, prompt="word " * 50)
            assert status == 400 and b"this key's limit is 20" in body

    asyncio.run(main())


def test_tool_definitions_and_calls_count_as_input(engine: EmbeddedServer, tmp_path: Path) -> None:
    """A chat's tools and earlier tool calls are rendered into the prompt by the template: they
    count against max_input_tokens (moving the text there passed a 20-token cap with ~200)."""
    key = new_key()
    described = " ".join(["word"] * 200)
    tools = [{"type": "function", "function": {"name": "f", "description": described}}]
    call = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": described}}]

    async def main() -> None:
        cfg = gateway_config(
            tmp_path,
            groups=[{"name": "g", "urls": [engine.base_url]}],
            tenants=[{"name": "a", "keys": [hash_key(key)], "max_input_tokens": 20}],
        )
        async with running(cfg) as gw, client() as s:
            headers = {"Authorization": f"Bearer {key}"}
            short = [{"role": "user", "content": "hi"}]
            for body in (
                {"messages": short, "tools": tools},
                {"messages": [*short, {"role": "assistant", "tool_calls": call}]},
            ):
                body |= {"model": MODEL, "max_tokens": 4}
                async with s.post(url(gw, "/v1/chat/completions"), json=body, headers=headers) as r:
                    text = await r.text()
                    assert r.status == 400 and "this key's limit is 20" in text, text
            body = {"model": MODEL, "max_tokens": 4, "messages": short}
            async with s.post(url(gw, "/v1/chat/completions"), json=body, headers=headers) as r:
                assert r.status == 200, await r.text()

    asyncio.run(main())


def test_tpm_exact_under_concurrency(engine: EmbeddedServer, tmp_path: Path) -> None:
    """tpm worth exactly 10 requests, 50 at once: exactly 10 admitted, 40 told when to retry."""
    worth = prompt_tokens() + 64

    async def main() -> list[tuple[int, bytes, dict[str, str]]]:
        cfg = gateway_config(
            tmp_path,
            groups=[{"name": "g", "urls": [engine.base_url]}],
            defaults={"tpm": 10 * worth},
        )
        async with running(cfg) as gw, client() as s:
            return list(await asyncio.gather(*(complete(s, gw, max_tokens=64) for _ in range(50))))

    results = asyncio.run(main())
    codes = [r[0] for r in results]
    assert codes.count(200) == 10 and codes.count(429) == 40, codes
    refused = [r for r in results if r[0] == 429]
    assert all(int(r[2]["Retry-After"]) >= 1 for r in refused)
    assert all(orjson.loads(r[1])["error"]["type"] == "tokens" for r in refused)


def test_batched_prompts_reserve_max_tokens_for_each_prompt(
    engine: EmbeddedServer, tmp_path: Path
) -> None:
    """A completions request with a list of 4 prompts makes the engine generate up to 4 ×
    max_tokens: it reserves that, so 50 at once against a quota worth 10 of them admit 10
    (it reserved one max_tokens for the whole batch: 40 admitted, 4× the quota generated)."""
    batch = [PROMPT] * 4
    body = orjson.dumps({"model": MODEL, "prompt": batch})
    worth = InputCounter().count(parse_body(body, "completions")) + 4 * 64

    async def main() -> list[int]:
        cfg = gateway_config(
            tmp_path,
            groups=[{"name": "g", "urls": [engine.base_url]}],
            defaults={"tpm": 10 * worth},
        )
        async with running(cfg) as gw, client() as s:
            res = await asyncio.gather(
                *(complete(s, gw, max_tokens=64, prompt=batch) for _ in range(50))  # type: ignore[arg-type]
            )
            return [r[0] for r in res]

    codes = asyncio.run(main())
    assert codes.count(200) == 10 and codes.count(429) == 40, codes
    # token ids: one list is one prompt, a list of lists one per element
    ids = parse_body(orjson.dumps({"model": MODEL, "prompt": [1, 2, 3], "n": 2}), "completions")
    assert ids.choices == 2
    ids = parse_body(orjson.dumps({"model": MODEL, "prompt": [[1], [2], [3]]}), "completions")
    assert ids.choices == 3


def test_concurrency_cap_exact(engine: EmbeddedServer, tmp_path: Path) -> None:
    async def main() -> list[int]:
        cfg = gateway_config(
            tmp_path,
            groups=[{"name": "g", "urls": [engine.base_url]}],
            defaults={"max_concurrency": 3},
        )
        async with running(cfg) as gw, client() as s:
            res = await asyncio.gather(*(complete(s, gw, max_tokens=100) for _ in range(12)))
            return [r[0] for r in res]

    codes = asyncio.run(main())
    assert codes.count(200) == 3 and codes.count(429) == 9, codes


def test_client_disconnect_aborts_the_engine_request(
    engine: EmbeddedServer, tmp_path: Path
) -> None:
    async def main() -> None:
        cfg = gateway_config(tmp_path, groups=[{"name": "g", "urls": [engine.base_url]}])
        before = await engine_metric(engine, "vllm:request_success_total", finished_reason="abort")
        async with running(cfg) as gw:
            reader, writer = await asyncio.open_connection("127.0.0.1", gw.port)
            body = orjson.dumps(
                {"model": MODEL, "prompt": PROMPT, "max_tokens": 3000, "stream": True}
            )
            writer.write(
                b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
            )
            await writer.drain()
            got = b""
            while got.count(b"data: {") < 3:
                got += await asyncio.wait_for(reader.read(65536), 20)
            writer.transport.abort()  # gone mid-stream

            async def aborted() -> bool:
                now = await engine_metric(
                    engine, "vllm:request_success_total", finished_reason="abort"
                )
                return now > before

            await wait_until(aborted, 20, "the engine counts the abort")
            assert await engine_metric(engine, "vllm:num_requests_running") == 0
            pool = gw.pools["g"]
            await wait_until(lambda: _true(pool.upstreams[0].inflight == 0), 5, "slot freed")

    asyncio.run(main())


def test_a_client_that_leaves_before_the_answer_is_charged_what_the_engine_may_have_made(
    engine: EmbeddedServer, tmp_path: Path
) -> None:
    """A non-streamed answer's head comes with its end: a client that hangs up while the engine
    generates keeps its reservation spent (it was given all back: the engine made tokens for
    nothing charged, a client could take any amount by hanging up just before the end); a
    stream that left mid-way is charged its prompt and the tokens it got."""
    frozen = MemoryQuota(clock=lambda: 1000.0)  # no refill: the level shows what was charged

    def level() -> float:
        return frozen._buckets[("default", "tpm")][0]

    async def main() -> None:
        cfg = gateway_config(
            tmp_path,
            groups=[{"name": "g", "urls": [engine.base_url]}],
            defaults={"tpm": 100_000},
        )
        gw = Gateway(cfg, None, frozen)
        await gw.start()
        try:
            async with client() as s:
                await complete(s, gw, max_tokens=4)  # the bucket exists
                for stream in (False, True):
                    before = level()
                    gen0 = await engine_metric(engine, "vllm:generation_tokens_total")
                    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 2000, "stream": stream}

                    async def hang_up(body: dict[str, object] = body) -> None:
                        async with s.post(url(gw), json=body) as r:
                            await r.content.read(1000)
                            await asyncio.sleep(30)  # cancelled: the client leaves

                    # the client leaves once the engine has made tokens for it (not after a
                    # fixed second, which a loaded box can spend before the first token: 6 made)
                    task = asyncio.create_task(hang_up())

                    async def working(gen0: float = gen0) -> bool:
                        made = await engine_metric(engine, "vllm:generation_tokens_total") - gen0
                        return made > 20

                    await wait_until(working, 30, "the engine generating")
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
                    await wait_until(lambda: _true(frozen.inflight("default") == 0), 10, "settled")
                    made = await engine_metric(engine, "vllm:generation_tokens_total") - gen0
                    charged = before - level()
                    assert made > 20, made  # the engine did work for this client
                    if stream:
                        assert charged >= made, (charged, made)
                        assert charged < prompt_tokens() + 2000
                    else:
                        assert charged == prompt_tokens() + 2000, (charged, made)
        finally:
            await gw.stop(drain_s=2.0)

    asyncio.run(main())


async def _true(v: bool) -> bool:
    return v


def test_fair_share_light_tenant_is_not_starved(engine: EmbeddedServer, tmp_path: Path) -> None:
    """One upstream slot; a heavy tenant floods it with long requests, a light one sends short
    ones: the light tenant's requests pass the heavy queue."""
    heavy, light = new_key(), new_key()

    async def main() -> tuple[list[float], list[float]]:
        cfg = gateway_config(
            tmp_path,
            groups=[{"name": "g", "urls": [engine.base_url], "max_concurrency": 1,
                     "adaptive": False}],
            tenants=[{"name": "heavy", "keys": [hash_key(heavy)]},
                     {"name": "light", "keys": [hash_key(light)]}],
        )  # fmt: skip
        async with running(cfg) as gw, client() as s:
            loop = asyncio.get_running_loop()
            done: dict[str, list[float]] = {"heavy": [], "light": []}
            t0 = loop.time()

            async def one(who: str, key: str, n: int) -> None:
                status, _b, _h = await complete(s, gw, key=key, max_tokens=n, stream=False)
                assert status == 200
                done[who].append(loop.time() - t0)

            tasks = [asyncio.create_task(one("heavy", heavy, 60)) for _ in range(6)]
            await asyncio.sleep(0.2)
            tasks += [asyncio.create_task(one("light", light, 4)) for _ in range(4)]
            await asyncio.gather(*tasks)
            return done["heavy"], done["light"]

    heavy_t, light_t = asyncio.run(main())
    # all four light requests finish before the heavy queue is half done
    assert max(light_t) < sorted(heavy_t)[2], (heavy_t, light_t)


def test_priority_headroom_keeps_a_slot_for_the_interactive_tenant(
    engine: EmbeddedServer, tmp_path: Path
) -> None:
    """Two upstream slots, headroom 1: while an interactive request runs, a standard tenant
    waits rather than take the last free slot, which the next interactive request gets at
    once; with no interactive request active the standard tenant uses both slots."""
    chat, bulk = new_key(), new_key()

    async def main() -> None:
        cfg = gateway_config(
            tmp_path,
            groups=[{"name": "g", "urls": [engine.base_url], "max_concurrency": 2,
                     "adaptive": False}],
            tenants=[{"name": "chat", "keys": [hash_key(chat)], "priority": "interactive"},
                     {"name": "bulk", "keys": [hash_key(bulk)]}],
            queue={"priority_headroom": 1},
        )  # fmt: skip
        async with running(cfg) as gw, client() as s:
            pool = gw.pools["g"]
            up = pool.upstreams[0]
            body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 2000, "stream": True}
            long = await s.post(url(gw), json=body, headers={"Authorization": f"Bearer {chat}"})
            assert long.status == 200
            await long.content.readany()  # its first bytes: an interactive request runs
            held = asyncio.create_task(complete(s, gw, key=bulk, max_tokens=4, stream=False))
            await wait_until(lambda: _true(len(pool.queue) == 1), what="bulk waiting")
            assert up.inflight == 1  # a free slot, kept for the interactive class
            status, _b, _h = await complete(s, gw, key=chat, max_tokens=4, stream=False)
            assert status == 200 and not held.done()
            long.close()  # the interactive stream ends (the engine aborts it): bulk may go
            status, _b, _h = await asyncio.wait_for(held, 60)
            assert status == 200 and gw.metrics.queue["bulk"].n == 1
            two = await asyncio.gather(
                *(complete(s, gw, key=bulk, max_tokens=4, stream=False) for _ in range(2))
            )
            assert [t[0] for t in two] == [200, 200]
            assert gw.metrics.queue["bulk"].n == 1, "no interactive request: both sent at once"
            assert pool.running == [0, 0, 0] and up.inflight == 0

    asyncio.run(main())


def test_bad_bodies_are_4xx(engine: EmbeddedServer, tmp_path: Path) -> None:
    cases = [
        b"", b"not json", b'"a string"', b"[1, 2]", b"42", b"null", b"{}",
        b'{"model": 3, "prompt": "x"}', b'{"model": "m"}', b'{"model": "m", "prompt": {}}',
        b'{"model": "m", "prompt": "x", "max_tokens": -1}',
        b'{"model": "m", "prompt": "x", "max_tokens": "9"}',
        b'{"model": "m", "prompt": "x", "stream": "yes"}',
        b'{"model": "m", "prompt": "x", "n": 0}',
    ]  # fmt: skip

    async def main() -> None:
        cfg = gateway_config(tmp_path, groups=[{"name": "g", "urls": [engine.base_url]}],
                             max_body_bytes=4096)  # fmt: skip
        async with running(cfg) as gw, client() as s:
            for raw in [*cases, b'{"model": "m", "prompt": "' + b"x" * 5000 + b'"}']:
                async with s.post(url(gw), data=raw) as r:
                    assert 400 <= r.status < 500, (raw[:60], r.status)
                    err = orjson.loads(await r.read())["error"]
                    assert err["message"]
            async with s.post(
                url(gw, "/v1/chat/completions"), data=b'{"model":"m","messages":[]}'
            ) as r:
                assert r.status == 400
            async with s.post(url(gw, "/v1/nothing"), data=b"{}") as r:
                assert r.status == 404

    asyncio.run(main())


def test_a_tokenizer_named_by_any_group_counts_the_input(
    engine: EmbeddedServer, tmp_path: Path
) -> None:
    """Only the second group names a tokenizer (e.g. the candidate's config carries it): the
    input is counted with it, not estimated (the first group's counter was always used)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"<unk>": 0, "the": 1, "cat": 2}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))

    async def main() -> None:
        cfg = gateway_config(
            tmp_path,
            groups=[
                {"name": "a", "urls": [engine.base_url]},
                {"name": "b", "urls": [engine.base_url], "tokenizer": str(tmp_path)},
            ],
            defaults={"max_input_tokens": 1},
        )
        async with running(cfg) as gw, client() as s:
            status, body, _ = await complete(s, gw, prompt="the cat sat")
            assert status == 400 and b"3 tokens (counted)" in body, body

    asyncio.run(main())


def test_groups_with_different_tokenizers_count_the_input_with_each(
    engine: EmbeddedServer, tmp_path: Path
) -> None:
    """A canary of another model: the groups name different tokenizers and the count is made
    before routing. The first group's tokenizer alone counted for both, so a prompt over the
    cap with the candidate's tokenizer went through; now the largest count is the request's."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    for name, digits in (("words", False), ("digits", True)):
        tok = Tokenizer(models.WordLevel({"<unk>": 0, "the": 1}, unk_token="<unk>"))
        tok.pre_tokenizer = (
            pre_tokenizers.Sequence(
                [pre_tokenizers.Whitespace(), pre_tokenizers.Digits(individual_digits=True)]
            )
            if digits
            else pre_tokenizers.Whitespace()
        )
        (tmp_path / name).mkdir()
        tok.save(str(tmp_path / name / "tokenizer.json"))

    async def main() -> None:
        cfg = gateway_config(
            tmp_path,
            groups=[
                {"name": "a", "urls": [engine.base_url], "tokenizer": str(tmp_path / "words")},
                {
                    "name": "b",
                    "urls": [engine.base_url],
                    "tokenizer": str(tmp_path / "digits"),
                    "weight": 0,
                },
            ],
            defaults={"max_input_tokens": 4},
        )
        async with running(cfg) as gw, client() as s:
            status, body, _ = await complete(s, gw, prompt="the 12345")  # 2 tokens, or 6
            assert status == 400 and b"6 tokens (counted)" in body, body
            status, body, _ = await complete(s, gw, prompt="the 123")  # 2, or 4: under the cap
            assert status == 200, body

    asyncio.run(main())
