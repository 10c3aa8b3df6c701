"""The measurement chain against a scripted server whose delays we know (a real process).

Timing is checked against what the server really did, not only against its script: on a
loaded machine the server itself runs late. With ``record_writes`` it stamps each request's
arrival and each content write on CLOCK_MONOTONIC, the clock of the run's records, so the
client's stamps can be held to it: a request is sent before the server reads it, a chunk
arrives after the server wrote it and, at the median, within a slack of it — a few
milliseconds plus the lateness the client measured of itself (its send lag).
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from servetune.client.stamped import kernel_stamps_supported
from servetune.loadgen.bench import bench
from servetune.results.io import read_records, read_run_result
from servetune.results.record import RequestRecord
from servetune.results.schema import BenchConfig, RunResult

Factory = Callable[..., Any]
CLOCK_TOL_MS = 0.5
"""Kernel arrival stamps are converted to CLOCK_MONOTONIC; this covers the conversion."""


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


def server_writes(srv: Any) -> list[dict[str, Any]]:
    """The server's own record (``record_writes``): arrival and content writes, in ns."""
    url = f"http://127.0.0.1:{srv.port}/scripted/writes"
    with urllib.request.urlopen(url, timeout=10) as resp:
        writes: list[dict[str, Any]] = json.loads(resp.read())
    return writes


class ServerView:
    """What the server did and what the client measured of it, on one clock (ms)."""

    def __init__(self, run: RunResult, recs: list[RequestRecord], writes: list[dict[str, Any]]):
        assert run.environment.clock_t0_ns is not None
        t0 = run.environment.clock_t0_ns
        ok = [x for x in recs if x.status == "ok"]
        assert len(ok) == len(writes), (len(ok), len(writes))

        def ms(values: list[float]) -> np.ndarray:
            return np.sort(np.array(values, dtype=float)) / 1e6

        # Order statistics, not matched pairs: if every request's client stamp is at or after
        # the server's, so is every order statistic, and no request needs matching.
        self.sent = ms([t0 + x.send_ns for x in ok])
        self.arrived = ms([w["arrival_ns"] for w in writes])
        self.first = ms([t0 + (x.first_ns or 0) for x in ok])
        self.first_written = ms([w["write_ns"][0] for w in writes])
        self.last = ms([t0 + (x.last_ns or 0) for x in ok])
        self.last_written = ms([w["write_ns"][-1] for w in writes])
        self.server_ttft = ms([w["write_ns"][0] - w["arrival_ns"] for w in writes])
        self.server_e2e = ms([w["write_ns"][-1] - w["arrival_ns"] for w in writes])
        self.server_gaps = np.concatenate([np.diff(w["write_ns"]) / 1e6 for w in writes])
        self.server_tpot = np.array(
            [
                (w["write_ns"][-1] - w["write_ns"][0]) / 1e6 / (x.output_tokens - 1)
                for w, x in zip(writes, ok, strict=True)
                if x.output_tokens and x.output_tokens > 1
            ]
        )
        lag = run.client_health.send_lag.p90
        self.slack = 2.0 + (lag or 0.0)
        """A few ms of loopback and wake-up, plus the client's own lateness: a client that
        is late sending is as late reading, and a late read stamps its chunks late."""

    def check(self) -> None:
        """The client measured what the server did: nothing before it happened, and at the
        median within the slack of when it happened."""
        assert np.all(self.sent <= self.arrived + CLOCK_TOL_MS), "sent after the server read it"
        assert np.all(self.first >= self.first_written - CLOCK_TOL_MS), "a token before it was sent"
        assert np.all(self.last >= self.last_written - CLOCK_TOL_MS), "a token before it was sent"
        late_first = float(np.median(self.first - self.first_written))
        late_last = float(np.median(self.last - self.last_written))
        assert late_first <= self.slack, (late_first, self.slack)
        assert late_last <= self.slack, (late_last, self.slack)


@pytest.mark.parametrize("transport", ["fast", "aiohttp"])
def test_latencies_match_the_servers_known_delays(
    scripted: Factory, tmp_path: Path, transport: str
) -> None:
    srv = scripted({"ttft_ms": 40, "tpot_ms": 4, "record_writes": True})
    r = bench(cfg(srv.base_url, http_client=transport), tmp_path, progress=False)
    s = r.summary
    assert s.completed == 40 and s.failed == 0
    view = ServerView(r, read_records(tmp_path), server_writes(srv))
    # the server kept its script (within uvloop's millisecond timers and its cached loop
    # clock, which can run a due time a little early); a late server sends what is overdue
    # at once, as an engine that fell behind does …
    assert view.server_ttft.min() >= 36 and view.server_e2e.min() >= 90
    # … and the client measured what it did: TTFT 40 ms at the server plus loopback, TPOT and
    # ITL 4 ms per token, E2E 40 + 15 × 4 — as late as the server and the client were
    view.check()
    assert 36 <= s.ttft.p50 <= float(np.median(view.server_ttft)) + view.slack, s.ttft
    assert abs(s.tpot.p50 - float(np.median(view.server_tpot))) <= 2 * view.slack / 15, s.tpot
    assert abs(s.itl.p50 - float(np.median(view.server_gaps))) <= 1.0 + view.slack, s.itl
    assert 90 <= s.e2el.p50 <= float(np.median(view.server_e2e)) + view.slack, s.e2el
    assert s.total_output_tokens == 40 * 16
    assert set(s.tokens_source) == {"usage"}
    run = read_run_result(tmp_path)
    assert run.target.model == "scripted-model"
    h = run.client_health
    # the client's account of its own lateness is the records' (on a loaded box it is late,
    # and says so rather than reporting latencies it could not measure at the rate asked)
    lags = [x.send_lag_ms for x in read_records(tmp_path)]
    assert h.send_lag.p50 == pytest.approx(float(np.percentile(lags, 50)))
    if h.send_lag.p99 is not None and h.send_lag.p99 > 5:
        assert h.behind
    assert h.behind == any("understate what users would see" in w for w in run.warnings)
    if transport == "aiohttp":
        assert h.arrival_stamps == "user"  # aiohttp's reader stamps when it wakes up
    elif kernel_stamps_supported():  # arrivals stamped by the kernel, and the result says so
        assert h.arrival_stamps == "kernel"
        assert h.kernel_stamped_share is not None and h.kernel_stamped_share > 0.9


def test_chunks_carrying_several_tokens(scripted: Factory, tmp_path: Path) -> None:
    srv = scripted({"ttft_ms": 10, "tpot_ms": 3, "tokens_per_chunk": 4, "record_writes": True})
    r = bench(cfg(srv.base_url, num_prompts=10), tmp_path, progress=False)
    recs = read_records(tmp_path)
    assert all(len(x.chunk_ns) == 4 and x.output_tokens == 16 for x in recs)
    view = ServerView(r, recs, server_writes(srv))
    view.check()
    # one chunk per 4 tokens: ITL is the chunk gap (≈ 12 ms at the server); TPOT is vLLM's
    # (E2E − TTFT)/(n − 1) = 3 gaps × 12 ms / 15 = 2.4 ms, as vllm bench serve would report
    # (not the chunk gap: that would be 12 ms)
    gap = float(np.median(view.server_gaps))
    assert abs(r.summary.itl.p50 - gap) <= 1.0 + view.slack, (r.summary.itl, gap)
    tpot = float(np.median(view.server_tpot))
    assert abs(r.summary.tpot.p50 - tpot) <= 2 * view.slack / 15, (r.summary.tpot, tpot)
    for x in recs:  # vLLM's TPOT, not the chunk gap
        assert x.first_ns is not None and x.last_ns is not None and x.tpot_ms is not None
        assert x.tpot_ms == pytest.approx((x.last_ns - x.first_ns) / 1e6 / 15)


def test_chat_stream_with_role_chunk_and_empty_texts(scripted: Factory, tmp_path: Path) -> None:
    srv = scripted(
        {
            "ttft_ms": 30,
            "tpot_ms": 2,
            "empty_text_every": 3,
            "keepalive_comments": True,
            "crlf": True,
            "record_writes": True,
        }
    )
    r = bench(cfg(srv.base_url, endpoint="chat", num_prompts=10), tmp_path, progress=False)
    assert r.summary.completed == 10
    recs = read_records(tmp_path)
    view = ServerView(r, recs, server_writes(srv))
    view.check()  # the first token is the first content chunk (the role chunk rides with it)
    assert 27 <= r.summary.ttft.p50 <= float(np.median(view.server_ttft)) + view.slack
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
    # the waiting is the cap's, recorded as queue delay, not as the client's own lateness
    # (which a loaded machine adds to a few sends: its median stays near zero)
    assert max(x.queue_delay_ms for x in recs) > 100
    lags = [x.send_lag_ms for x in recs]
    waits = [x.queue_delay_ms - x.send_lag_ms for x in recs]
    assert np.percentile(lags, 50) < 2 and np.percentile(waits, 50) > 20
    # a capped rate is not "behind"; only the client's own lag could make it so
    assert r.client_health.behind == (r.client_health.send_lag.p99 > 5)


def test_duration_bounds_the_run(scripted: Factory, tmp_path: Path) -> None:
    srv = scripted({"tpot_ms": 1})
    c = cfg(srv.base_url, duration_s=2.0, num_prompts=10**9, request_rate=25.0)
    r = bench(c, tmp_path, progress=False, num_prompts_given=False)
    assert 30 <= r.summary.completed <= 75
    assert max(x.send_ns for x in read_records(tmp_path)) < 2.0e9


def test_two_worker_processes_share_one_clock(scripted: Factory, tmp_path: Path) -> None:
    srv = scripted({"ttft_ms": 15, "tpot_ms": 1, "record_writes": True})
    r = bench(
        cfg(srv.base_url, num_prompts=80, request_rate=80.0, workers=2), tmp_path, progress=False
    )
    recs = read_records(tmp_path)
    assert sorted(x.id for x in recs) == list(range(80))
    assert {x.worker for x in recs} == {0, 1}
    assert r.client_health.workers == 2
    if kernel_stamps_supported():  # both workers' stamp counts reach the result
        assert r.client_health.arrival_stamps == "kernel"
    # one clock: both workers' stamps line up with the server's (a worker on a clock of its
    # own would be off by its offset), and each worker's sends follow the shared plan: never
    # early, and at least one on time (an offset would make all of them late)
    view = ServerView(r, recs, server_writes(srv))
    view.check()
    assert 13 <= r.summary.ttft.p50 <= float(np.median(view.server_ttft)) + view.slack
    for w in (0, 1):
        lags = [x.send_lag_ms for x in recs if x.worker == w]
        assert -1.5 < min(lags) < 5  # uvloop timers: ±1 ms


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


def test_a_warm_up_that_covers_the_whole_run_fails_the_run(
    scripted: Factory, tmp_path: Path
) -> None:
    """--warmup 100 on a one-second run: the summary measured no request; it was status
    complete, exit 0, and nothing said so. A measurement of nothing failed as a measurement."""
    srv = scripted({})
    r = bench(cfg(srv.base_url, num_prompts=3, warmup_s=100.0), tmp_path, progress=False)
    assert r.summary.completed == 0 and len(read_records(tmp_path)) == 3
    assert any("no request falls in the measured window" in w for w in r.warnings)
    assert r.status == "failed"
    on_disk = read_run_result(tmp_path)
    assert on_disk.warnings == r.warnings and on_disk.status == "failed"


def test_a_warm_up_that_leaves_requests_to_measure_is_complete(
    scripted: Factory, tmp_path: Path
) -> None:
    srv = scripted({})
    r = bench(
        cfg(srv.base_url, num_prompts=3, request_rate=20.0, warmup_s=0.0001),
        tmp_path,
        progress=False,
    )
    assert r.summary.completed >= 1 and r.status == "complete"
    assert not any("measured window" in w for w in r.warnings)
