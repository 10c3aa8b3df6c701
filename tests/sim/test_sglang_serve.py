"""``sim serve --engine sglang`` speaks SGLang's /metrics: the names a real SGLang exposes, so
the scraper picks SGLang's map and bench reads the server's figures as it reads SGLang's."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from tests.conftest import run_cli

from servetune.metrics.engine_maps import detect
from servetune.profiles.sglang import SGLANG
from servetune.sim.config import EngineConfig
from servetune.sim.embedded import EmbeddedServer, start_embedded


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddedServer]:
    srv = start_embedded(
        EngineConfig(engine="sglang", gpu="H100-SXM", model="Qwen3-0.6B", max_model_len=4096)
    )
    yield srv
    srv.stop()


def _names(text: str) -> set[str]:
    out = set()
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name = line.split("{", 1)[0].split(" ", 1)[0]
            for suffix in ("_bucket", "_count", "_sum"):
                if name.endswith(suffix):
                    name = name[: -len(suffix)]
            out.add(name)
    return out


def test_metrics_are_sglangs(server: EmbeddedServer) -> None:
    async def go() -> str:
        async with aiohttp.ClientSession() as s:
            for _ in range(3):
                async with s.post(
                    server.base_url + "/completions", json={"prompt": "a " * 50, "max_tokens": 4}
                ) as r:
                    assert r.status == 200
            async with s.get(server.url + "/metrics") as r:
                return await r.text()

    text = asyncio.run(go())
    names = _names(text)
    assert not any(n.startswith("vllm:") for n in names)
    for name in (
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
        "sglang:token_usage",
        "sglang:cache_hit_rate",
        "sglang:prompt_tokens_total",
        "sglang:generation_tokens_total",
        "sglang:num_requests_total",
        "sglang:num_retracted_requests_total",
        "sglang:time_to_first_token_seconds",
        "sglang:inter_token_latency_seconds",
        "sglang:time_per_output_token_seconds",
        "sglang:e2e_request_latency_seconds",
        "sglang:queue_time_seconds",
    ):
        assert name in names, name
    assert detect(names) is SGLANG
    missing = [
        c
        for c, sources in (*SGLANG.values.items(), *SGLANG.histograms.items())
        if not any(src.name in names for src in sources)
    ]
    assert missing == []
    assert 'sglang:prompt_tokens_total{model_name="Qwen/Qwen3-0.6B"} 150.0' in text
    assert 'sglang:generation_tokens_total{model_name="Qwen/Qwen3-0.6B"} 12.0' in text


def test_bench_reads_it_as_sglang(server: EmbeddedServer, tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = run_cli(
        "bench",
        "--base-url",
        server.base_url,
        "--model",
        "Qwen/Qwen3-0.6B",
        "--num-prompts",
        "12",
        "--request-rate",
        "20",
        "--random-input-len",
        "64",
        "--random-output-len",
        "8",
        "--result-dir",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    run = json.loads((out / "run.json").read_text())
    names = run["server"]["names_found"]
    assert names["running"].startswith("sglang:")
    assert names["ttft_seconds"].startswith("sglang:")
    assert run["target"]["simulated"]["semantics"] == "sglang-srt"
