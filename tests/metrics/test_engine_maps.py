"""Engine detection and the name maps, on every engine fixture."""

from __future__ import annotations

import pytest
from metrics_fixtures import ENGINE_FIXTURES, load

from servetune.metrics.engine_maps import ENGINE_MAPS, all_base_names, detect
from servetune.metrics.extract import extract
from servetune.metrics.prometheus import parse, wanted_sample_names
from servetune.results import server_series as ss


@pytest.mark.parametrize(("name", "expected"), list(ENGINE_FIXTURES.items()))
def test_detects_engine_and_version(name: str, expected: tuple[str, str, list[str]]) -> None:
    engine, version, missing = expected
    # the scraper detects from a page parsed with the union of every map's names
    p = parse(load(name), wanted_sample_names(all_base_names()))
    m = detect(p.names())
    assert m is not None
    assert (m.engine, m.version) == (engine, version)
    _, _, used = extract(p, m)
    assert [c for c in m.concepts() if c not in used] == missing


def test_unknown_pages_detect_nothing() -> None:
    assert detect(parse(load("dcgm_exporter.txt")).names()) is None
    assert detect(parse(load("edge_cases.txt")).names()) is None
    assert detect(set()) is None


def test_a_merged_page_goes_to_the_engine_with_most_names() -> None:
    text = load("vllm_v1_0.10.txt") + "llamacpp:requests_processing 1\n"
    m = detect(parse(text).names())
    assert m is not None and m.engine == "vllm"


def _extract(name: str) -> tuple[dict[str, float], dict[str, object], dict[str, str]]:
    p = parse(load(name))
    m = detect(p.names())
    assert m is not None
    return extract(p, m)


def test_vllm_v1_finished_and_aborted_come_from_request_success() -> None:
    values, hists, used = _extract("vllm_v1_0.10.txt")
    assert values[ss.REQUESTS_FINISHED_TOTAL] == 294.0  # stop 0 + length 291 + abort 3
    assert values[ss.REQUESTS_ABORTED_TOTAL] == 3.0
    assert used[ss.REQUESTS_ABORTED_TOTAL] == 'vllm:request_success_total{finished_reason="abort"}'
    # 0.10 still shows the deprecated name; the new one is preferred
    assert used[ss.KV_CACHE_USAGE] == "vllm:kv_cache_usage_perc"
    assert used[ss.ITL_SECONDS] == "vllm:inter_token_latency_seconds"
    assert ss.TPOT_SECONDS not in hists  # no per-request TPOT histogram before 0.11


def test_vllm_032_capture() -> None:
    p = parse(load("vllm_cpu_0.32_capture.txt"))
    values, hists, used = _extract("vllm_cpu_0.32_capture.txt")
    assert (values[ss.RUNNING], values[ss.WAITING]) == (4.0, 6.0)
    # finished = every reason, including 0.32's "error" and "repetition"
    reasons = {s.labels["finished_reason"] for s in p.series("vllm:request_success_total")}
    assert {"stop", "length", "abort", "error", "repetition"} <= reasons
    assert values[ss.REQUESTS_FINISHED_TOTAL] == 4.0
    assert values[ss.REQUESTS_ABORTED_TOTAL] == 0.0
    assert hists[ss.TTFT_SECONDS].count == 8.0  # at first token: the 4 running count too
    assert used[ss.TPOT_SECONDS] == "vllm:request_time_per_output_token_seconds"


def test_vllm_dp_engines_sum_counts_and_average_kv() -> None:
    p = parse(load("vllm_cpu_0.32_dp2.txt"))
    values, _, used = _extract("vllm_cpu_0.32_dp2.txt")
    running = [s.value for s in p.series("vllm:num_requests_running")]
    kv = [s.value for s in p.series("vllm:kv_cache_usage_perc")]
    assert len(running) == len(kv) == 2
    assert values[ss.RUNNING] == sum(running)
    assert values[ss.KV_CACHE_USAGE] == pytest.approx(sum(kv) / 2)
    assert used[ss.TPOT_SECONDS] == "vllm:request_time_per_output_token_seconds"
    assert values[ss.PREFIX_CACHE_HITS_TOTAL] == 2 * 113920.0


def test_vllm_v0_abort_series_absent_reads_zero() -> None:
    values, _, used = _extract("vllm_0.8_v0.txt")
    assert values[ss.REQUESTS_ABORTED_TOTAL] == 0.0  # V0 creates reason series lazily
    assert values[ss.REQUESTS_FINISHED_TOTAL] == 1000.0
    assert values[ss.PREFIX_CACHE_HIT_RATE] == pytest.approx(0.4112)
    assert used[ss.ITL_SECONDS] == "vllm:time_per_output_token_seconds"


def test_sglang_2024_hit_rate_is_a_percentage() -> None:
    old, _, _ = _extract("sglang_2024.txt")
    new, _, _ = _extract("sglang_recent.txt")
    assert old[ss.PREFIX_CACHE_HIT_RATE] == pytest.approx(0.1061)
    assert new[ss.PREFIX_CACHE_HIT_RATE] == pytest.approx(0.007507552643049313)
    assert old[ss.RUNNING] == 31.0 and new[ss.RUNNING] == 57.0
    assert new[ss.PREEMPTIONS_TOTAL] == 41.0


def test_tgi_token_totals_come_from_length_histogram_sums() -> None:
    p = parse(load("tgi.txt"))
    values, hists, _ = _extract("tgi.txt")
    assert values[ss.PROMPT_TOKENS_TOTAL] == p.value("tgi_request_input_length_sum")
    assert values[ss.RUNNING] == 32.0 and values[ss.WAITING] == 7.0
    assert set(hists) == {ss.E2E_SECONDS, ss.QUEUE_SECONDS, ss.TPOT_SECONDS}


def test_llamacpp_versions() -> None:
    old, _, _ = _extract("llamacpp_old.txt")
    new, _, _ = _extract("llamacpp_b11434.txt")
    assert old[ss.KV_CACHE_USAGE] == pytest.approx(0.416992)
    assert ss.KV_CACHE_USAGE not in new
    # the real capture: 4 slots busy, 4 requests deferred, nothing finished yet
    assert (new[ss.RUNNING], new[ss.WAITING]) == (4.0, 4.0)
    assert new[ss.PROMPT_TOKENS_TOTAL] == 40.0
    assert new[ss.GENERATION_TOKENS_TOTAL] == 0.0


def test_every_map_names_its_engine_prefix() -> None:
    for m in ENGINE_MAPS:
        for name in m.base_names():
            assert name.startswith(m.prefix), (m.label, name)
