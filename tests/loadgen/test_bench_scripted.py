"""The measurement chain against a scripted server whose delays we know (a real process)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from servetune.client.stamped import kernel_stamps_supported
from servetune.loadgen.bench import bench
from servetune.results.io import read_records, read_run_result
from servetune.results.schema import BenchConfig

Factory = Callable[..., Any]


def cfg(url: str, **kw: Any) -> BenchConfig:
    base: dict[str, Any] = dict(
        base_url=url,
        random_input_len=32,
        random_output_len=16,
        num_prompts=40,
        request_rate=20.0,
        seed=1,
    )
    base.update(kw)
    return BenchConfig(**base)


@pytest.mark.parametrize("transport", ["fast", "aiohttp"])
def test_latencies_match_the_servers_known_delays(
    scripted: Factory, tmp_path: Path, transport: str
) -> None:
    srv = scripted({"ttft_ms": 40, "tpot_ms": 4})
    r = bench(cfg(srv.base_url, http_client=transport), tmp_path, progress=False)
    s = r.summary
    assert s.completed == 40 and s.failed == 0
    # TTFT: 40 ms at the server plus loopback and timer slack; TPOT/ITL: 4 ms per token.
    assert 40 <= s.ttft.p50 <= 46, s.ttft
    assert 3.6 <= s.tpot.mean <= 4.8, s.tpot
    assert 3.0 <= s.itl.p50 <= 5.5, s.itl
    assert 100 <= s.e2el.p50 <= 112, s.e2el  # 40 + 15 × 4
    assert s.total_output_tokens == 40 * 16
    assert set(s.tokens_source) == {"usage"}
    run = read_run_result(tmp_path)
    assert run.target.model == "scripted-model"
    assert run.client_health.send_lag.p50 is not None and run.client_health.send_lag.p50 < 5
    h = run.client_health
    if transport == "aiohttp":
        assert h.arrival_stamps == "user"  # aiohttp's reader stamps when it wakes up
    elif kernel_stamps_supported():  # arrivals stamped by the kernel, and the result says so
        assert h.arrival_stamps == "kernel"
        assert h.kernel_stamped_share is not None and h.kernel_stamped_share > 0.9


def test_chunks_carrying_several_tokens(scripted: Factory, tmp_path: Path) -> None:
    srv = scripted({"ttft_ms": 10, "tpot_ms": 3, "tokens_per_chunk": 4})
    r = bench(cfg(srv.base_url, num_prompts=10), tmp_path, progress=False)
    recs = read_records(tmp_path)
    assert all(len(x.chunk_ns) == 4 and x.output_tokens == 16 for x in recs)
    # one chunk per 4 tokens: ITL is the chunk gap (≈ 12 ms); TPOT is vLLM's
    # (E2E − TTFT)/(n − 1) = 3 gaps × 12 ms / 15 = 2.4 ms, as vllm bench serve would report
    assert 10 <= r.summary.itl.p50 <= 15
    assert 2.3 <= r.summary.tpot.mean <= 3.0


def test_chat_stream_with_role_chunk_and_empty_texts(scripted: Factory, tmp_path: Path) -> None:
    srv = scripted(
        {
            "ttft_ms": 30,
            "tpot_ms": 2,
            "empty_text_every": 3,
            "keepalive_comments": True,
            "crlf": True,
        }
    )
    r = bench(cfg(srv.base_url, endpoint="chat", num_prompts=10), tmp_path, progress=False)
    assert r.summary.completed == 10
    assert 30 <= r.summary.ttft.p50 <= 36
    recs = read_records(tmp_path)
    # the role-only opening chunk counts as a chunk (vLLM's rule): 1 + 16 content chunks
    assert all(len(x.chunk_ns) == 17 and x.output_tokens == 16 for x in recs)


def test_llama_cpp_style_stream_without_done(scripted: Factory, tmp_path: Path) -> None:
    srv = scripted({"usage_in_last_chunk": True, "send_done": False, "tpot_ms": 1})
    r = bench(cfg(srv.base_url, num_prompts=8, endpoint="chat"), tmp_path, progress=False)
    assert r.summary.completed == 8 and r.summary.total_output_tokens == 8 * 16


@pytest.mark.parametrize("transport", ["fast", "aiohttp"])
def test_failures_become_records_with_reasons(
    scripted: Factory, tmp_path: Path, transport: str
) -> None:
    srv = scripted(
        {"tpot_ms": 1, "fail_every": 5, "error_midstream_every": 7, "disconnect_every": 11}
    )
    c = cfg(srv.base_url, num_prompts=60, request_rate=60.0, http_client=transport)
    r = bench(c, tmp_path, progress=False)
    errors = r.summary.errors
    assert r.summary.completed + r.summary.failed == 60
    assert any(e.startswith("HTTP 500: injected failure") for e in errors)
    assert any("mid-stream: injected error" in e for e in errors)
    assert any(("reset" in e) or ("disconnected" in e) for e in errors), errors
    assert r.summary.failed >= 12 + 8 + 5 - 3  # overlaps of the three schedules


def test_concurrency_cap_bounds_requests_in_flight(scripted: Factory, tmp_path: Path) -> None:
    srv = scripted({"ttft_ms": 20, "tpot_ms": 2})
    r = bench(
        cfg(srv.base_url, request_rate=float("inf"), max_concurrency=4, num_prompts=30),
        tmp_path,
        progress=False,
    )
    assert r.summary.max_concurrent_requests == 4
    recs = read_records(tmp_path)
    # the waiting is the cap's, recorded as queue delay; the client itself is not late
    assert max(x.queue_delay_ms for x in recs) > 100
    lags = [x.send_lag_ms for x in recs]
    assert np.percentile(lags, 50) < 2 and np.percentile(lags, 99) < 25  # generous: shared box
    # a capped rate is not "behind"; only the client's own lag could make it so
    assert r.client_health.behind == (r.client_health.send_lag.p99 > 5)


def test_duration_bounds_the_run(scripted: Factory, tmp_path: Path) -> None:
    srv = scripted({"tpot_ms": 1})
    c = cfg(srv.base_url, duration_s=2.0, num_prompts=10**9, request_rate=25.0)
    r = bench(c, tmp_path, progress=False, num_prompts_given=False)
    assert 30 <= r.summary.completed <= 75
    assert max(x.send_ns for x in read_records(tmp_path)) < 2.0e9


def test_two_worker_processes_share_one_clock(scripted: Factory, tmp_path: Path) -> None:
    srv = scripted({"ttft_ms": 15, "tpot_ms": 1})
    r = bench(
        cfg(srv.base_url, num_prompts=80, request_rate=80.0, workers=2), tmp_path, progress=False
    )
    recs = read_records(tmp_path)
    assert sorted(x.id for x in recs) == list(range(80))
    assert {x.worker for x in recs} == {0, 1}
    assert r.client_health.workers == 2
    if kernel_stamps_supported():  # both workers' stamp counts reach the result
        assert r.client_health.arrival_stamps == "kernel"
    assert 15 <= r.summary.ttft.p50 <= 30
    # one clock: each worker's sends follow the shared plan (never early, rarely late)
    lags = [x.send_lag_ms for x in recs]
    assert min(lags) > -1.5 and np.percentile(lags, 50) < 5  # uvloop timers: ±1 ms


def test_existing_run_dir_is_not_overwritten_by_accident(scripted: Factory, tmp_path: Path) -> None:
    from servetune.errors import ResultError

    srv = scripted({})
    bench(cfg(srv.base_url, num_prompts=3), tmp_path, progress=False)
    with pytest.raises(ResultError, match="already holds a run"):
        bench(cfg(srv.base_url, num_prompts=3), tmp_path, progress=False)
    r = bench(cfg(srv.base_url, num_prompts=3), tmp_path, progress=False, overwrite=True)
    assert r.summary.completed == 3 and len(read_records(tmp_path)) == 3


def test_prompt_lengths_aligned_with_the_servers_tokenize(
    scripted: Factory, tmp_path: Path
) -> None:
    srv = scripted({"tokens_per_word": 3})
    r = bench(cfg(srv.base_url, random_input_len=90, num_prompts=12), tmp_path, progress=False)
    assert r.target.tokenizer == "server" and not r.target.tokens_approximate
    recs = read_records(tmp_path)
    # the server counts 3 tokens a word: prompts were resized to 30 words = 90 tokens
    assert {x.prompt_tokens for x in recs} == {90}
    assert {x.planned_input_len for x in recs} == {90}


@pytest.mark.parametrize("transport", ["fast", "aiohttp"])
def test_keep_alive_closed_by_the_server_is_retried_on_a_fresh_connection(
    scripted: Factory, tmp_path: Path, transport: str
) -> None:
    srv = scripted({"drop_reused_connections": True, "tpot_ms": 1})
    # sequential requests: every one after the first would reuse a kept-alive connection
    c = cfg(
        srv.base_url,
        num_prompts=15,
        request_rate=float("inf"),
        max_concurrency=1,
        http_client=transport,
    )
    r = bench(c, tmp_path, progress=False)
    assert r.summary.completed == 15 and r.summary.failed == 0, r.summary.errors


def test_scraper_does_its_costly_first_read_before_t0(
    scripted: Factory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Session, connection, engine detection (a full parse of the page) happen before the
    run's t0, so they cannot delay the first sends; at t0 the scraper only starts its loop."""
    from servetune.metrics.scraper import MetricsScraper

    seen: dict[str, int] = {}
    prepare, start = MetricsScraper.prepare, MetricsScraper.start

    async def timed_prepare(self: MetricsScraper, gpu_wait_s: float = 5.0) -> None:
        first = not self._prepared
        await prepare(self, gpu_wait_s)
        if first:
            seen["prepared"] = time.perf_counter_ns()

    async def timed_start(self: MetricsScraper, t0_ns: int | None = None) -> None:
        seen["start_t0"] = t0_ns or -1
        await start(self, t0_ns)

    monkeypatch.setattr(MetricsScraper, "prepare", timed_prepare)
    monkeypatch.setattr(MetricsScraper, "start", timed_start)
    srv = scripted({"ttft_ms": 5, "tpot_ms": 1})
    r = bench(cfg(srv.base_url, num_prompts=10, request_rate=50.0), tmp_path, progress=False)
    t0 = r.environment.clock_t0_ns
    assert t0 is not None
    assert seen["start_t0"] == t0
    assert seen["prepared"] < t0
