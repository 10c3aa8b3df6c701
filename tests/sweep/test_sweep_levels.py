"""Level planning: rate and concurrency lists, auto levels, labels, per-level configs."""

from __future__ import annotations

import itertools
import math

import pytest

from servetune.errors import ConfigError
from servetune.results.schema import BenchConfig
from servetune.results.sweep_schema import PlannedLevel
from servetune.sweep.levels import (
    auto_fractions,
    auto_rates,
    level_config,
    level_label,
    parse_concurrencies,
    parse_rates,
    probe_level,
)


def test_parse_rates() -> None:
    assert parse_rates("8,16, 32,64,128") == [8, 16, 32, 64, 128]
    assert parse_rates("16,8,8") == [8, 16]
    assert parse_rates("AUTO") == "auto"
    assert parse_rates("1,inf") == [1, math.inf]
    for bad in ("8,x", "0,8", "-1", ","):
        with pytest.raises(ConfigError):
            parse_rates(bad)


def test_parse_concurrencies() -> None:
    assert parse_concurrencies("4,1,2") == [1, 2, 4]
    for bad in ("1.5", "0", "a", ""):
        with pytest.raises(ConfigError):
            parse_concurrencies(bad)


def test_auto_levels_span_10_to_120_percent_denser_near_saturation() -> None:
    for n in (4, 6, 8, 12):
        f = auto_fractions(n)
        assert len(f) == n
        assert f[0] == pytest.approx(0.1) and f[-1] == pytest.approx(1.2)
        assert all(b > a for a, b in itertools.pairwise(f))
    f = auto_fractions(8)
    gaps = [b - a for a, b in itertools.pairwise(f)]
    assert max(gaps[:2]) > 1.5 * min(gaps[4:6])  # finer steps around 1.0
    assert auto_rates(37.3) == [3.73, 11.2, 18.6, 26.1, 31.7, 35.4, 39.2, 44.8]
    with pytest.raises(ConfigError):
        auto_rates(0.0)


def test_labels_and_level_configs() -> None:
    assert level_label("rate", 12.5) == "rate-12.5"
    assert level_label("rate", 8.0) == "rate-8"
    assert level_label("concurrency", 4.0) == "conc-4"
    assert level_label("rate", 13.3531, "confirm") == "confirm-rate-13.3531"
    base = BenchConfig(num_prompts=300, max_concurrency=None, request_rate=5.0)
    rate = level_config(base, PlannedLevel(label="rate-8", mode="rate", value=8.0))
    assert rate.request_rate == 8.0 and rate.label == "rate-8" and rate.num_prompts == 300
    conc = level_config(base, PlannedLevel(label="conc-4", mode="concurrency", value=4.0))
    assert conc.max_concurrency == 4 and conc.request_rate == 5.0
    probe = level_config(
        base.model_copy(update={"num_prompts": 10**9, "duration_s": 60.0}), probe_level()
    )
    assert math.isinf(probe.request_rate) and probe.num_prompts == 1000
    assert probe.duration_s is None
