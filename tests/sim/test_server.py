"""The real-time simulated server over loopback, read with a plain aiohttp streaming client."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterator

import aiohttp
import pytest

from servetune.sim.config import EngineConfig
from servetune.sim.embedded import EmbeddedServer, start_embedded


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddedServer]:
    srv = start_embedded(EngineConfig(max_model_len=4096))
    yield srv
    srv.stop()


async def _stream(url: str, body: dict) -> list[dict]:  # type: ignore[type-arg]
    out = []
    async with aiohttp.ClientSession() as s, s.post(url, json=body) as r:
        assert r.status == 200
        async for line in r.content:
            if line.startswith(b"data: "):
                data = line[6:].strip()
                out.append({"done": True} if data == b"[DONE]" else json.loads(data))
    return out


def test_completions_stream_like_vllm(server: EmbeddedServer) -> None:
    body = {
        "prompt": "the " * 200,
        "max_tokens": 8,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    chunks = asyncio.run(_stream(server.base_url + "/completions", body))
    assert chunks[-1] == {"done": True}
    usage = chunks[-2]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 8
    assert usage["usage"]["prompt_tokens"] == 200
    content = [c for c in chunks[:-2] if c["choices"]]
    assert len(content) == 8 and content[-1]["choices"][0]["finish_reason"] == "length"


def test_chat_stream_opens_with_the_role(server: EmbeddedServer) -> None:
    body = {
        "messages": [{"role": "user", "content": "hello there"}],
        "max_tokens": 3,
        "stream": True,
    }
    chunks = asyncio.run(_stream(server.base_url + "/chat/completions", body))
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert sum(1 for c in chunks[1:-1] if c["choices"][0]["delta"].get("content")) == 3


def test_models_tokenize_too_long_and_metrics(server: EmbeddedServer) -> None:
    async def go() -> None:
        async with aiohttp.ClientSession() as s:
            async with s.get(server.base_url + "/models") as r:
                assert (await r.json())["data"][0]["max_model_len"] == 4096
            async with s.post(
                server.url + "/tokenize", json={"model": "x", "prompt": "a b c"}
            ) as r:
                tok = await r.json()
                assert tok["count"] == 3 and tok["max_model_len"] == 4096
                assert len(tok["tokens"]) == 3
            async with s.post(
                server.base_url + "/completions", json={"prompt": "hi", "max_tokens": 5000}
            ) as r:
                assert r.status == 400
                assert "maximum context length is 4096" in (await r.json())["message"]
            async with s.get(server.url + "/health") as r:
                assert r.status == 200
            async with s.get(server.url + "/metrics") as r:
                text = await r.text()
            for name in (
                "vllm:gpu_cache_usage_perc",
                "vllm:kv_cache_usage_perc",
                "vllm:num_requests_running",
                "vllm:num_requests_waiting",
                "vllm:num_preemptions_total",
                "vllm:prompt_tokens_total",
                "vllm:generation_tokens_total",
                "vllm:request_success_total",
                "vllm:time_to_first_token_seconds_bucket",
                "vllm:time_per_output_token_seconds_bucket",
                "vllm:request_time_per_output_token_seconds_bucket",
                "vllm:inter_token_latency_seconds_bucket",
                "vllm:e2e_request_latency_seconds_bucket",
                "vllm:request_queue_time_seconds_bucket",
                "vllm:request_prefill_time_seconds_bucket",
                "vllm:request_decode_time_seconds_bucket",
                "vllm:cache_config_info",
            ):
                assert name in text, name

    asyncio.run(go())


def test_disconnect_aborts_in_the_engine(server: EmbeddedServer) -> None:
    async def go() -> float:
        async with aiohttp.ClientSession() as s:
            body = {"prompt": "x", "max_tokens": 3000, "stream": True}
            async with s.post(server.base_url + "/completions", json=body) as r:
                await r.content.readline()  # first token, then hang up
        deadline = asyncio.get_running_loop().time() + 30  # a loaded box is slow to notice
        while asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
            async with aiohttp.ClientSession() as s, s.get(server.url + "/metrics") as r:
                text = await r.text()
            for line in text.splitlines():
                if (
                    line.startswith("vllm:request_success_total")
                    and '"abort"' in line
                    and float(line.split()[-1]) >= 1
                ):
                    return float(line.split()[-1])
        return 0.0

    assert asyncio.run(go()) >= 1


def _itl_sum_count(text: str) -> tuple[float, float]:
    got = {}
    for line in text.splitlines():
        for part in ("_sum", "_count"):
            if line.startswith("vllm:inter_token_latency_seconds" + part + "{"):
                got[part] = float(line.split()[-1])
    return got["_sum"], got["_count"]


async def _stamped_stream(url: str, body: dict) -> list[float]:  # type: ignore[type-arg]
    """The client's arrival time of each content event."""
    stamps = []
    async with aiohttp.ClientSession() as s, s.post(url, json=body) as r:
        async for line in r.content:
            if line.startswith(b"data: {") and b'"choices":[{' in line:
                stamps.append(time.perf_counter())
    return stamps


def test_tokens_leave_on_the_simulated_clock(server: EmbeddedServer) -> None:
    """Each token leaves at (never before) the end of the simulated step that made it: the
    client's gaps between tokens are the engine's inter-token latencies. Bounds are loose
    enough for a loaded 2-core box: lateness shows in the lag figures, not in this test."""

    async def go() -> tuple[float, float, list[list[float]], dict]:  # type: ignore[type-arg]
        async with aiohttp.ClientSession() as s:
            async with s.get(server.url + "/metrics") as r:
                before = _itl_sum_count(await r.text())
            body = {"prompt": "w " * 100, "max_tokens": 20, "stream": True}
            url = server.base_url + "/completions"
            streams = await asyncio.gather(*[_stamped_stream(url, body) for _ in range(16)])
            async with s.get(server.url + "/metrics") as r:
                after = _itl_sum_count(await r.text())
            async with s.get(server.url + "/sim/stats") as r:
                stats = await r.json()
        sim_itl = (after[0] - before[0]) / (after[1] - before[1])
        return sim_itl, after[1] - before[1], streams, stats

    sim_itl, gaps, streams, stats = asyncio.run(go())
    assert gaps == 16 * 19 and all(len(x) == 20 for x in streams)
    client_itl = sum((x[-1] - x[0]) / 19 for x in streams) / 16
    # The engine's steps follow one another on its clock, and a loop late by more than
    # CATCH_UP_S moves that clock on, so the client's gaps follow the simulated ones.
    assert 0.5 * sim_itl <= client_itl <= 2 * sim_itl + 0.02, (client_itl, sim_itl)
    lag = stats["emission_lag_ms"]
    assert lag["count"] >= 320
    assert lag["min"] >= 0.0  # never before the step's end
    assert lag["p50"] < 250.0  # behind by a wake-up, not by whole steps
    assert stats["writer"] == "plain"


def test_pipelined_requests_and_bad_bodies(server: EmbeddedServer) -> None:
    async def go() -> bytes:
        r, w = await asyncio.open_connection("127.0.0.1", server.port)
        body = json.dumps({"prompt": "hi", "max_tokens": 2, "stream": True}).encode()
        req = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (
            len(body),
            body,
        )
        bad = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\n[1]"
        last = b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        w.write(req + bad + req + last)
        out = await asyncio.wait_for(r.read(), 30)
        w.close()
        return out

    out = asyncio.run(go())
    assert re.findall(rb"HTTP/1\.1 (\d+)", out) == [b"200", b"400", b"200", b"200"]
    assert out.count(b"data: [DONE]") == 2 and b"must be a JSON object" in out
