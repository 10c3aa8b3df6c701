"""The /metrics scraper against real engines: it detects each engine, maps the names they
really expose (vLLM V1; llama.cpp build 11434), and reports the ones that are missing."""

from __future__ import annotations

from pathlib import Path

import pytest
from real_engines import unexpected_failures

from servetune.engines import EngineProcess, provisioned
from servetune.loadgen.bench import bench
from servetune.results.io import read_server_series
from servetune.results.schema import BenchConfig, ServerInfo

pytestmark = pytest.mark.real_engine


def scraped(engine: str, eng: EngineProcess, tiny: provisioned.TinyModel, out: Path) -> ServerInfo:
    cfg = BenchConfig(
        base_url=eng.base_url,
        model="tiny",
        random_input_len=64,
        random_output_len=32,
        ignore_eos=True,
        num_prompts=16,
        request_rate=4.0,
        tokenizer=str(tiny.hf_dir),
        seed=3,
    )
    result = bench(cfg, out, progress=False, metrics_interval_s=0.5)
    assert not unexpected_failures(out, engine)
    assert result.server is not None and result.server.error is None
    assert result.server.samples >= 3
    assert len(read_server_series(out)) == result.server.samples
    return result.server


def test_vllm_v1_names(vllm8: EngineProcess, tiny: provisioned.TinyModel, tmp_path: Path) -> None:
    info = scraped("vllm-cpu", vllm8, tiny, tmp_path / "run")
    assert info.engine == "vllm"
    expected = {
        "kv_cache_usage": "vllm:kv_cache_usage_perc",
        "running": "vllm:num_requests_running",
        "waiting": "vllm:num_requests_waiting",
        "preemptions_total": "vllm:num_preemptions_total",
        "prompt_tokens_total": "vllm:prompt_tokens_total",
        "generation_tokens_total": "vllm:generation_tokens_total",
        "ttft_seconds": "vllm:time_to_first_token_seconds",
        "tpot_seconds": "vllm:request_time_per_output_token_seconds",
        "e2e_seconds": "vllm:e2e_request_latency_seconds",
        "itl_seconds": "vllm:inter_token_latency_seconds",
        "queue_seconds": "vllm:request_queue_time_seconds",
    }
    for concept, name in expected.items():
        assert info.names_found.get(concept) == name, concept
    assert "kv_cache_usage" not in info.names_missing


def test_llama_cpp_names_and_the_missing_kv_gauge(
    llama8: EngineProcess, tiny: provisioned.TinyModel, tmp_path: Path
) -> None:
    info = scraped("llama.cpp", llama8, tiny, tmp_path / "run")
    assert info.engine == "llama.cpp"
    assert info.names_found["running"] == "llamacpp:requests_processing"
    assert info.names_found["waiting"] == "llamacpp:requests_deferred"
    assert info.names_found["prompt_tokens_total"] == "llamacpp:prompt_tokens_total"
    assert info.names_found["generation_tokens_total"] == "llamacpp:tokens_predicted_total"
    # Build 11434 dropped its KV-usage gauge: reported missing, and the run still succeeded.
    assert "kv_cache_usage" in info.names_missing
    assert info.summary.get("running_max", 0) >= 1
