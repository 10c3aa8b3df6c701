"""The scraper live against the simulated engine's own /metrics (a real server process)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import aiohttp
import pytest
from live_server import wait_until

from servetune.metrics.scraper import MetricsScraper, metrics_url_for
from servetune.results import server_series as ss
from servetune.results.io import SERVER_METRICS_FILE, read_server_series
from servetune.results.schema import ServerInfo

sim_config = pytest.importorskip("servetune.sim.config", reason="simulated engine not built")
sim_embedded = pytest.importorskip("servetune.sim.embedded", reason="simulated engine not built")
plan_memory = pytest.importorskip("servetune.sim.memory").plan_memory

REQUESTS = 8
MAX_TOKENS = 16


async def _complete(session: aiohttp.ClientSession, base: str, model: str) -> None:
    body = {
        "model": model,
        "prompt": "hello " * 64,
        "max_tokens": MAX_TOKENS,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    async with session.post(base + "/completions", json=body) as resp:
        assert resp.status == 200, await resp.text()
        async for _ in resp.content:
            pass


def test_scraper_reads_the_simulated_engine(tmp_path: Path) -> None:
    server = sim_embedded.start_embedded(sim_config.EngineConfig())
    try:

        async def main() -> ServerInfo:
            async with aiohttp.ClientSession() as session:
                async with session.get(server.base_url + "/models") as resp:
                    model = (await resp.json())["data"][0]["id"]
                t0 = time.perf_counter_ns()
                out = tmp_path / SERVER_METRICS_FILE
                s = MetricsScraper(metrics_url_for(server.base_url), out, t0, interval_s=0.1)
                await s.start()
                await wait_until(lambda: len(s.samples) >= 1)
                await asyncio.gather(
                    *(_complete(session, server.base_url, model) for _ in range(REQUESTS))
                )
                n = len(s.samples)
                await wait_until(lambda: len(s.samples) >= n + 2)
                return await s.stop()

        info = asyncio.run(main())
    finally:
        server.stop()
    assert info.error is None
    assert info.engine == "vllm"
    assert info.summary["engine_version"] == "V1 (>=0.10)"
    assert info.names_found[ss.KV_CACHE_USAGE] == "vllm:kv_cache_usage_perc"
    assert info.names_found[ss.TPOT_SECONDS] == "vllm:request_time_per_output_token_seconds"
    # the simulator exposes every concept vLLM V1 has, the phase histograms included
    assert info.names_missing == []
    assert info.names_found[ss.PREFILL_SECONDS] == "vllm:request_prefill_time_seconds"
    assert info.names_found[ss.DECODE_SECONDS] == "vllm:request_decode_time_seconds"
    series = read_server_series(tmp_path)
    assert len(series) == info.samples
    first, last = series[0], series[-1]
    gen = last.values[ss.GENERATION_TOKENS_TOTAL] - first.values[ss.GENERATION_TOKENS_TOTAL]
    assert gen == REQUESTS * MAX_TOKENS
    done = last.values[ss.REQUESTS_FINISHED_TOTAL] - first.values[ss.REQUESTS_FINISHED_TOTAL]
    assert done == REQUESTS
    assert info.summary["ttft_ms"]["count"] == REQUESTS
    assert info.summary["tpot_ms"]["p50"] > 0
    assert info.summary["prefill_ms"]["count"] == REQUESTS
    assert info.summary["decode_ms"]["count"] == REQUESTS
    assert info.summary["decode_ms"]["mean"] > 0
    # the pool the simulator's /metrics announces (vllm:cache_config_info) is its memory plan's
    mem = plan_memory(sim_config.EngineConfig().resolve())
    assert info.summary["kv_cache_tokens"] == mem.kv_cache_tokens
    assert info.summary["kv_cache_blocks"] == mem.num_gpu_blocks
    assert info.summary["kv_block_size"] == 16
    assert info.summary["gpu_memory_utilization"] == 0.9
