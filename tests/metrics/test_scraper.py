"""The scraper live against real HTTP servers on 127.0.0.1, including the broken ones."""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket
import time
from pathlib import Path

import pytest
from aiohttp import web
from live_server import serve, text_handler, wait_until
from metrics_fixtures import advanced, load

from servetune.metrics.scraper import PARSE_SLICE_LINES, MetricsScraper, metrics_url_for
from servetune.results import server_series as ss
from servetune.results.io import SERVER_METRICS_FILE, iter_jsonl, read_server_series
from servetune.results.schema import ServerInfo

INTERVAL = 0.05


def warnings_from_scraper(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.name == "servetune.metrics.scraper" and r.levelno >= logging.WARNING
    ]


@pytest.mark.parametrize(
    ("base", "expected"),
    [
        ("http://h:8000/v1", "http://h:8000/metrics"),
        ("http://h:8000/v1/", "http://h:8000/metrics"),
        ("http://h:8000", "http://h:8000/metrics"),
        ("https://gw.example/team/llm/v1", "https://gw.example/team/llm/metrics"),
        ("http://127.0.0.1:9/v1?x=1", "http://127.0.0.1:9/metrics"),
    ],
)
def test_metrics_url_for(base: str, expected: str) -> None:
    assert metrics_url_for(base) == expected


def test_vllm_live_counters_change_between_scrapes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    base = load("vllm_v1_0.10.txt")
    handler, hits = text_handler(lambda n: advanced(base, n))
    out = tmp_path / SERVER_METRICS_FILE

    async def main() -> tuple[ServerInfo, int, MetricsScraper]:
        async with serve({"/metrics": handler}) as (url, _):
            t0 = time.perf_counter_ns()
            s = MetricsScraper(metrics_url_for(url + "/v1"), out, t0, interval_s=INTERVAL)
            s.measure_cpu = True
            await s.start()
            await wait_until(lambda: len(s.samples) >= 5)
            # appended as they come: a run killed now keeps them
            lines_now = len(out.read_bytes().splitlines())
            return await s.stop(), lines_now, s

    with caplog.at_level(logging.INFO, logger="servetune.metrics"):
        info, lines_before_stop, scraper = asyncio.run(main())
    assert lines_before_stop >= 5
    assert not warnings_from_scraper(caplog)
    assert info.error is None
    assert info.engine == "vllm"
    assert info.summary["engine_version"] == "V1 (>=0.10)"
    assert info.metrics_url.endswith("/metrics")
    assert info.names_found[ss.KV_CACHE_USAGE] == "vllm:kv_cache_usage_perc"
    assert info.names_found[ss.TTFT_SECONDS] == "vllm:time_to_first_token_seconds"
    assert info.names_missing == [ss.TPOT_SECONDS]
    assert any("tpot_seconds not exposed by this server" in r.message for r in caplog.records)

    series = read_server_series(tmp_path)
    # every scrape is a sample (the final one of stop() included), but the engine-detecting
    # read that start() makes before the first sample
    assert len(series) == info.samples == hits[0] - 1 >= 6
    ts = [s.t for s in series]
    assert ts[0] < 0.5  # the first scrape runs at once
    assert ts == sorted(ts)
    # paced by the interval (the last one is stop()'s final scrape, taken whenever it is called):
    # the k-th scrape starts no earlier than k intervals after start(), and a sample is stamped
    # when its response arrived, later still. Not gap by gap: a response delayed by a loaded
    # box shortens the gap to the next, on-schedule one (40 ms late, then on time: 10 ms).
    loop_ts = ts[:-1]
    assert all(t >= k * INTERVAL - 1e-3 for k, t in enumerate(loop_ts)), loop_ts
    gen = [s.values[ss.GENERATION_TOKENS_TOTAL] for s in series]
    assert [b - a for a, b in itertools.pairwise(gen)] == [100.0] * (len(gen) - 1)
    # page n (from 0, the detecting read) says waiting = n
    assert [s.values[ss.WAITING] for s in series] == [float(i + 1) for i in range(len(series))]
    assert series[-1].histograms[ss.TTFT_SECONDS].count == 240 + 10 * len(series)
    # the file holds what the scraper kept in memory
    assert [s.t for s in scraper.samples] == ts
    # the page (452 lines) was parsed in slices, yielding to the loop in between
    assert len(base.splitlines()) > 2 * PARSE_SLICE_LINES
    assert all(0 < b < t for b, t in zip(scraper.block_cpu_s, scraper.busy_cpu_s, strict=True)), (
        scraper.block_cpu_s,
        scraper.busy_cpu_s,
    )

    summ = info.summary
    span = ts[-1] - ts[0]
    assert summ["generation_tokens_per_s"] == pytest.approx(100 * (len(ts) - 1) / span)
    assert summ["ttft_ms"]["count"] == 10 * (len(ts) - 1)
    # every windowed observation was 0.05 s: inside the (0.04, 0.06] bucket
    assert 40.0 <= summ["ttft_ms"]["p50"] <= 60.0
    assert summ["waiting_slope_per_s"] > 0
    # the same figures over a window of the run (the client's measured window)
    windowed = scraper.info(ts[1], ts[3]).summary
    assert windowed["window_s"] == [ts[1], ts[3]]
    assert windowed["ttft_ms"]["count"] == 20
    assert windowed["engine_version"] == "V1 (>=0.10)"
    # the engine's cache config, from vllm:cache_config_info's labels, in every summary
    for summary in (summ, windowed):
        assert summary["kv_cache_blocks"] == 27298
        assert summary["kv_block_size"] == 16
        assert summary["kv_cache_tokens"] == 27298 * 16
        assert summary["gpu_memory_utilization"] == 0.9
        assert summary["kv_cache_dtype"] == "auto"


def test_llamacpp_recent_build_reports_kv_missing(tmp_path: Path) -> None:
    handler, _ = text_handler(lambda n: load("llamacpp_b11434.txt"))

    async def main() -> ServerInfo:
        async with serve({"/metrics": handler}) as (url, _):
            s = MetricsScraper(url + "/metrics", tmp_path / "m.jsonl", time.perf_counter_ns(), 1.0)
            await s.start()
            await wait_until(lambda: len(s.samples) >= 1)
            return await s.stop()

    info = asyncio.run(main())
    assert info.error is None
    assert (info.engine, info.names_missing) == ("llama.cpp", [ss.KV_CACHE_USAGE])
    assert info.samples == 2


def test_llamacpp_slots_come_from_its_props(tmp_path: Path) -> None:
    """llama.cpp's cap on requests decoded at once (-np) is configuration, read from /props
    once, never inferred from how many ran (a short run's peak says nothing of the cap)."""
    handler, _ = text_handler(lambda n: load("llamacpp_b11434.txt"))

    async def props(_: web.Request) -> web.Response:
        return web.json_response(
            {"total_slots": 3, "default_generation_settings": {"n_ctx": 768}, "build_info": "b0"}
        )

    async def main(routes: dict[str, object]) -> ServerInfo:
        async with serve(routes) as (url, _):  # type: ignore[arg-type]
            s = MetricsScraper(url + "/metrics", tmp_path / "m.jsonl", time.perf_counter_ns(), 1.0)
            await s.prepare()
            await s.start()
            await wait_until(lambda: len(s.samples) >= 1)
            return await s.stop()

    info = asyncio.run(main({"/metrics": handler, "/props": props}))
    assert info.engine == "llama.cpp"
    assert info.summary["max_num_seqs"] == 3 and info.summary["slot_context_tokens"] == 768
    # An older build without /props: no key, and nothing else changes.
    (tmp_path / "m.jsonl").unlink()
    info = asyncio.run(main({"/metrics": handler}))
    assert "max_num_seqs" not in info.summary and info.error is None


def _run_failing(
    tmp_path: Path, routes: dict[str, object] | None, attempts: int = 4
) -> tuple[ServerInfo, MetricsScraper]:
    """Scrape a broken target for ``attempts`` scrapes; None = nothing listens on the port."""

    async def scrape(url: str) -> tuple[ServerInfo, MetricsScraper]:
        s = MetricsScraper(url + "/metrics", tmp_path / "m.jsonl", time.perf_counter_ns(), INTERVAL)
        await s.start()
        await wait_until(lambda: len(s.block_s) >= attempts)
        return await s.stop(), s

    async def main() -> tuple[ServerInfo, MetricsScraper]:
        if routes is None:
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                port = sock.getsockname()[1]
            return await scrape(f"http://127.0.0.1:{port}")
        async with serve(routes) as (url, _):  # type: ignore[arg-type]
            return await scrape(url)

    return asyncio.run(main())


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("404", "answered HTTP 404"),
        ("refused", "cannot connect"),
        ("garbage", "is not Prometheus text"),
        ("foreign", "no vLLM, SGLang, TGI or llama.cpp metric names"),
    ],
)
def test_broken_metrics_reported_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, case: str, message: str
) -> None:
    html = "<html><head><title>Welcome</title></head>\n<body>hello</body></html>\n"
    foreign = "# TYPE python_gc_objects_collected_total counter\n" + "\n".join(
        f'python_gc_objects_collected_total{{generation="{i}"}} {i}.0' for i in range(3)
    )
    routes: dict[str, object] | None
    if case == "404":
        routes = {"/other": text_handler(lambda n: "")[0]}
    elif case == "refused":
        routes = None
    elif case == "garbage":
        routes = {"/metrics": text_handler(lambda n: html)[0]}
    else:
        routes = {"/metrics": text_handler(lambda n: foreign)[0]}
    with caplog.at_level(logging.INFO, logger="servetune.metrics"):
        info, scraper = _run_failing(tmp_path, routes)
    warned = warnings_from_scraper(caplog)
    assert len(warned) == 1, [r.message for r in warned]
    assert message in warned[0].getMessage()
    assert info.error is not None and message in info.error
    assert info.samples == 0 and info.engine is None
    assert len(scraper.block_s) >= 5  # it went on trying, quietly
    assert (tmp_path / "m.jsonl").read_bytes() == b""


def test_recovers_after_a_bad_start(tmp_path: Path) -> None:
    page = load("sglang_recent.txt")

    async def handle(req: web.Request) -> web.Response:
        hits[0] += 1
        if hits[0] <= 2:
            return web.Response(status=503, text="starting")
        return web.Response(text=page)

    hits = [0]

    async def main() -> ServerInfo:
        async with serve({"/metrics": handle}) as (url, _):
            s = MetricsScraper(url + "/metrics", tmp_path / "m.jsonl", time.perf_counter_ns(), 0.05)
            await s.start()
            await wait_until(lambda: len(s.samples) >= 2)
            return await s.stop()

    info = asyncio.run(main())
    assert info.engine == "sglang"
    assert info.error is not None
    assert "HTTP 503" in info.error and "later scrapes succeeded" in info.error
    assert info.samples >= 2


def test_server_gone_mid_run_keeps_samples(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    handler, hits = text_handler(lambda n: load("tgi.txt"))

    async def main() -> ServerInfo:
        async with serve({"/metrics": handler}) as (url, runner):
            s = MetricsScraper(url + "/metrics", tmp_path / "m.jsonl", time.perf_counter_ns(), 0.05)
            await s.start()
            await wait_until(lambda: len(s.samples) >= 3)
            await runner.cleanup()
            n = len(s.block_s)
            await wait_until(lambda: len(s.block_s) >= n + 3)
            return await s.stop()

    with caplog.at_level(logging.WARNING, logger="servetune.metrics"):
        info = asyncio.run(main())
    assert info.engine == "tgi"
    assert info.samples == hits[0] - 1 >= 3  # the detecting read keeps no sample
    lines = (tmp_path / "m.jsonl").read_bytes().splitlines()
    assert len(lines) == info.samples
    assert info.error is not None
    assert len(warnings_from_scraper(caplog)) == 1


def test_dcgm_gpu_figures_join_the_samples(tmp_path: Path) -> None:
    vllm, _ = text_handler(lambda n: load("vllm_0.8_v0.txt"))
    dcgm, dcgm_hits = text_handler(lambda n: load("dcgm_exporter.txt"))

    async def main() -> ServerInfo:
        async with serve({"/metrics": vllm, "/dcgm/metrics": dcgm}) as (url, _):
            s = MetricsScraper(
                url + "/metrics",
                tmp_path / "m.jsonl",
                time.perf_counter_ns(),
                0.05,
                dcgm_url=url + "/dcgm/metrics",
            )
            await s.start()
            await wait_until(lambda: len(s.samples) >= 2)
            return await s.stop()

    info = asyncio.run(main())
    assert info.summary["gpu_source"] == "dcgm"
    rows = [obj for _, obj in iter_jsonl(tmp_path / "m.jsonl")]
    assert len(rows) == info.samples == dcgm_hits[0]
    v = rows[0]["values"]
    assert v[ss.GPU_UTILIZATION] == pytest.approx(0.8)  # mean of 90 % and 70 %
    assert v[ss.GPU_MEMORY_USED_BYTES] == (77000 + 75000) * 2**20
    assert v[ss.GPU_MEMORY_TOTAL_BYTES] == (77000 + 4000 + 75000 + 6000) * 2**20
    assert v[ss.KV_CACHE_USAGE] == pytest.approx(0.8731)
    assert info.summary["gpu_utilization_mean"] == pytest.approx(0.8)
    assert info.names_found[ss.GPU_UTILIZATION] == "DCGM_FI_DEV_GPU_UTIL"
    assert info.names_found[ss.KV_CACHE_USAGE] == "vllm:gpu_cache_usage_perc"


def test_a_dcgm_failure_never_stops_the_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    vllm, _ = text_handler(lambda n: load("vllm_v1_0.10.txt"))

    async def main() -> ServerInfo:
        async with serve({"/metrics": vllm}) as (url, _):
            s = MetricsScraper(
                url + "/metrics",
                tmp_path / "m.jsonl",
                time.perf_counter_ns(),
                0.05,
                dcgm_url=url + "/no-dcgm-here",
            )
            await s.start()
            await wait_until(lambda: len(s.samples) >= 3)
            return await s.stop()

    with caplog.at_level(logging.WARNING):
        info = asyncio.run(main())
    assert info.error is None and info.samples >= 3
    assert "HTTP 404" in info.summary["gpu_error"]
    gpu_warnings = [r for r in caplog.records if "GPU metrics unavailable" in r.getMessage()]
    assert len(gpu_warnings) == 1


def test_stop_without_start_and_bad_interval(tmp_path: Path) -> None:
    s = MetricsScraper("http://127.0.0.1:9/metrics", tmp_path / "m.jsonl", 0)
    info = asyncio.run(s.stop())
    assert info.samples == 0 and info.error is None
    with pytest.raises(ValueError):
        MetricsScraper("http://127.0.0.1:9/metrics", tmp_path / "m.jsonl", 0, interval_s=0)


def test_trtllm_metrics_are_found_at_its_profile_path(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """TensorRT-LLM serves /prometheus/metrics and answers 404 at /metrics: the scraper, given
    the base URL's /metrics, finds the page at the other engines' paths and keeps it."""
    handler, _ = text_handler(lambda n: load("trtllm_collector.txt"))

    async def main() -> tuple[ServerInfo, str]:
        async with serve({"/prometheus/metrics": handler}) as (url, _):
            s = MetricsScraper(
                metrics_url_for(url + "/v1"),
                tmp_path / SERVER_METRICS_FILE,
                time.perf_counter_ns(),
                1.0,
            )
            await s.start()
            await wait_until(lambda: len(s.samples) >= 1)
            return await s.stop(), s.metrics_url

    with caplog.at_level(logging.WARNING):
        info, used = asyncio.run(main())
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert used.endswith("/prometheus/metrics")
    assert info.error is None and info.engine == "trtllm"
    assert info.names_missing == []
    got = {s.values.get(ss.RUNNING) for s in read_server_series(tmp_path)}
    assert got == {61.0}


def test_a_server_with_no_metrics_anywhere_is_reported_once(tmp_path: Path) -> None:
    async def main() -> ServerInfo:
        async with serve({}) as (url, _):
            s = MetricsScraper(url + "/metrics", tmp_path / "m.jsonl", time.perf_counter_ns(), 1.0)
            await s.start()
            await s.stop()
            return await s.stop()

    info = asyncio.run(main())
    assert info.error is not None and "/metrics" in info.error and "404" in info.error
