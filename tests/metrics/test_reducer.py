"""The scraper's Reducer gives the full parser's answers, on every fixture and its variants."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from metrics_fixtures import ENGINE_FIXTURES, load

from servetune.metrics.engine_maps import detect
from servetune.metrics.extract import extract, reducer_for
from servetune.metrics.prom_reducer import Reducer
from servetune.metrics.prometheus import parse


def spaced(text: str) -> str:
    """Labels written `k = "v", k2="v2"`: legal, and off the reducer's fast path."""
    return text.replace('",', '", ').replace('="', ' = "')


def escaped(text: str) -> str:
    """A label value with escapes on every labelled line (model names can hold anything)."""
    return text.replace("{", '{path="C:\\\\m \\"x\\"",', 1 << 30).replace(",}", "}")


def crlf(text: str) -> str:
    return text.replace("\n", "\r\n")


VARIANTS: dict[str, Callable[[str], str]] = {
    "as-is": lambda t: t,
    "spaced": spaced,
    "escaped": escaped,
    "crlf": crlf,
}


def _same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12)


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("name", list(ENGINE_FIXTURES))
def test_reducer_equals_parser(name: str, variant: str) -> None:
    text = VARIANTS[variant](load(name))
    full = parse(text)
    assert full.bad_lines == 0
    emap = detect(full.names())
    assert emap is not None
    reducer = reducer_for(emap)
    assert reducer is not None
    reducer.feed(text.split("\n"))
    v1, h1, u1 = extract(full, emap)
    v2, h2, u2 = extract(reducer, emap)
    assert u1 == u2
    assert v1.keys() == v2.keys()
    for k in v1:
        assert _same(v1[k], v2[k]), (k, v1[k], v2[k])
    assert h1.keys() == h2.keys()
    for k in h1:
        assert h1[k].buckets == h2[k].buckets, k
        assert _same(h1[k].sum, h2[k].sum) and _same(h1[k].count, h2[k].count), k
    assert reducer.bad_lines == 0


def test_reducer_fed_in_slices_and_reset() -> None:
    text = load("vllm_cpu_0.32_dp2.txt")
    emap = detect(parse(text).names())
    assert emap is not None
    whole = reducer_for(emap)
    sliced = reducer_for(emap)
    assert whole is not None and sliced is not None
    lines = text.split("\n")
    whole.feed(lines)
    sliced.feed(['vllm:num_requests_running{engine="9"} 1000'])
    sliced.reset()
    for i in range(0, len(lines), 37):
        sliced.feed(lines[i : i + 37])
    assert extract(whole, emap) == extract(sliced, emap)


def test_reducer_values_match_parser_on_edge_cases() -> None:
    text = load("edge_cases.txt")
    full = parse(text)
    names = ["spaced_metric", "nan_gauge", "exp_value", "int_value", "indented_metric"]
    names += ["with_timestamp", "om_counter_total", "crlf_metric", "inf_gauge"]
    r = Reducer(
        names,
        [("esc_metric", (("quote", 'say "hi"'),)), ("inf_gauge", (("sign", "minus"),))],
        [],
    )
    r.feed(text.split("\n"))
    for n in names:
        assert r.has(n) == full.has(n), n
        assert _same(r.value(n), full.value(n)), n
    assert r.value("esc_metric", {"quote": 'say "hi"'}) == 1.0
    assert r.value("inf_gauge", {"sign": "minus"}) == -math.inf
    assert math.isnan(r.value("inf_gauge") or 0.0)  # +Inf + -Inf
    assert r.value("nan_gauge") is None and r.has("nan_gauge")
    assert r.value("int_value", agg="max") == 7.0
    with pytest.raises(ValueError):
        r.value("int_value", agg="median")


def test_reducer_ignores_look_alike_label_names() -> None:
    # "handle" ends in "le": only a real `le` label may name a bucket
    text = (
        'h_bucket{handle="x",le="0.5"} 2\n'
        'h_bucket{handle="x",le="+Inf"} 3\n'
        'h_count{handle="x"} 3\nh_sum{handle="x"} 1.5\n'
    )
    r = Reducer([], [], ["h"])
    r.feed(text.split("\n"))
    assert r.histogram("h") == parse(text).histogram("h")
    hist = r.histogram("h")
    assert hist is not None and hist.buckets == [(0.5, 2.0)] and hist.count == 3.0
    with pytest.raises(ValueError):
        r.histogram("h", {"handle": "x"})
