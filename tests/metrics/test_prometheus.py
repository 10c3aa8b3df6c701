"""The exposition parser on every fixture and on the format's corner cases."""

from __future__ import annotations

import math

import pytest
from metrics_fixtures import DATA, ENGINE_FIXTURES, load

from servetune.metrics.prometheus import parse, wanted_sample_names

ALL_FIXTURES = sorted(p.name for p in DATA.glob("*.txt"))


@pytest.mark.parametrize("name", [n for n in ALL_FIXTURES if n != "edge_cases.txt"])
def test_every_fixture_parses_without_a_bad_line(name: str) -> None:
    p = parse(load(name))
    assert p.lines > 10
    assert p.bad_lines == 0
    assert sum(len(v) for v in p.samples.values()) == p.lines


def test_fixture_list_covers_every_engine_file() -> None:
    assert set(ENGINE_FIXTURES) | {"edge_cases.txt", "dcgm_exporter.txt"} == set(ALL_FIXTURES)


@pytest.mark.parametrize("name", list(ENGINE_FIXTURES))
def test_wanted_filter_keeps_exactly_the_wanted_samples(name: str) -> None:
    text = load(name)
    full = parse(text)
    some = sorted(full.samples)[::3]
    wanted = frozenset(some)
    p = parse(text, wanted)
    assert set(p.samples) == wanted
    for s in some:
        assert p.samples[s] == full.samples[s]
    assert set(p.types) <= wanted


def test_vllm_counter_family_and_types() -> None:
    p = parse(load("vllm_v1_0.10.txt"))
    assert p.types["vllm:prompt_tokens_total"] == "counter"
    assert p.types["vllm:time_to_first_token_seconds"] == "histogram"
    assert p.helps["vllm:num_requests_waiting"] == "Number of requests waiting to be processed."
    # counters come with their _created twin, which is a separate sample name
    assert p.has("vllm:prompt_tokens_created")
    success = p.series("vllm:request_success_total")
    by_reason = {s.labels["finished_reason"]: s.value for s in success}
    assert by_reason == {"stop": 0.0, "length": 291.0, "abort": 3.0}


def test_tgi_page_has_types_but_no_help() -> None:
    p = parse(load("tgi.txt"))
    assert p.helps == {}
    assert p.types["tgi_request_duration"] == "histogram"
    assert p.value("tgi_queue_size") == 7.0
    prefill = p.value("tgi_batch_inference_count", {"method": "prefill"})
    assert prefill == 410.0


def test_edge_cases() -> None:
    p = parse(load("edge_cases.txt"))
    assert p.bad_lines == 3  # prose, an unterminated label value, a non-numeric value
    esc = p.series("esc_metric")[0].labels
    assert esc == {"path": "C:\\dir\\file", "quote": 'say "hi"', "nl": "a\nb"}
    assert p.helps["esc_metric"] == "A help text with a backslash \\ and a newline \n in it."
    assert p.types["esc_metric"] == "gauge"
    assert p.series("spaced_metric")[0].labels == {"a": "1", "b": "2"}
    assert p.value("spaced_metric") == 2.5
    assert p.series("brace_in_value")[0].labels == {"v": "a}b", "w": "{"}
    assert math.isnan(p.series("nan_gauge")[0].value)
    assert p.value("nan_gauge") is None  # NaN is "no value", not a number to add
    assert p.value("inf_gauge", {"sign": "plus"}) == math.inf
    assert p.value("inf_gauge", {"sign": "minus"}) == -math.inf
    assert math.isnan(p.value("inf_gauge") or 0.0)  # +Inf + -Inf: NaN, not an exception
    ts = p.series("with_timestamp")[0]
    assert (ts.value, ts.timestamp_ms) == (42.0, 1700000000000)
    assert p.value("exp_value") == 1.5e6
    assert p.value("int_value") == 7.0
    om = p.series("om_counter_total")[0]
    assert (om.value, om.timestamp_ms, om.labels) == (17.0, None, {"a": "b"})  # exemplar dropped
    assert p.series("my.dotted.metric")[0].labels == {"a": "b"}
    assert p.value("indented_metric") == 9.0
    assert [s.value for s in p.series("crlf_metric")] == [11.0, 12.0]
    assert p.series("crlf_metric")[1].labels == {"a": "2"}


def test_garbage_is_all_bad_lines() -> None:
    html = "<html>\n<head><title>404 Not Found</title></head>\n<body>nope</body>\n</html>\n"
    p = parse(html)
    assert p.samples == {}
    assert p.bad_lines == p.lines == 4
    assert parse("").lines == 0


def test_histogram_sums_label_sets_and_drops_inf_bucket() -> None:
    p = parse(load("vllm_cpu_0.32_dp2.txt"))
    h = p.histogram("vllm:time_to_first_token_seconds")
    assert h is not None
    per_engine = [
        p.histogram("vllm:time_to_first_token_seconds", {"engine": e}) for e in ("0", "1")
    ]
    assert all(x is not None for x in per_engine)
    e0, e1 = per_engine
    assert e0 is not None and e1 is not None
    assert h.count == e0.count + e1.count == 480.0
    assert h.sum == pytest.approx(e0.sum + e1.sum)
    assert [le for le, _ in h.buckets] == [le for le, _ in e0.buckets]
    assert all(math.isfinite(le) for le, _ in h.buckets)
    for (le, c), (_, c0), (_, c1) in zip(h.buckets, e0.buckets, e1.buckets, strict=True):
        assert c == c0 + c1, le
    assert p.histogram("vllm:no_such_histogram") is None


def test_value_aggregations() -> None:
    p = parse(load("vllm_cpu_0.32_dp2.txt"))
    vals = [s.value for s in p.series("vllm:kv_cache_usage_perc")]
    assert len(vals) == 2
    assert p.value("vllm:kv_cache_usage_perc", agg="mean") == pytest.approx(sum(vals) / 2)
    assert p.value("vllm:kv_cache_usage_perc", agg="max") == max(vals)
    assert p.value("vllm:num_requests_running") == sum(
        s.value for s in p.series("vllm:num_requests_running")
    )
    with pytest.raises(ValueError):
        p.value("vllm:num_requests_running", agg="median")


def test_wanted_sample_names_covers_suffixes() -> None:
    w = wanted_sample_names(["a:b"])
    assert {"a:b", "a:b_bucket", "a:b_sum", "a:b_count", "a:b_total", "a:b_created"} == set(w)


def test_dcgm_spaced_labels_take_the_careful_path() -> None:
    text = (
        'DCGM_FI_DEV_FB_FREE{gpu="0", UUID="GPU-8c16", device="nvidia0"} 7064\n'
        'DCGM_FI_DEV_FB_USED{gpu="0", UUID="GPU-8c16", device="nvidia0"} 1057\n'
    )
    p = parse(text)
    assert p.bad_lines == 0
    assert p.series("DCGM_FI_DEV_FB_USED")[0].labels == {
        "gpu": "0",
        "UUID": "GPU-8c16",
        "device": "nvidia0",
    }
