"""Flags as ``vllm bench serve`` has them: --percentile-metrics, --metric-percentiles and
--ignore-eos (off by default), with its semantics and defaults."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from tests.conftest import run_cli

from servetune.client.payload import build_body
from servetune.metrics.summary import summarize
from servetune.results.record import RequestRecord
from servetune.results.schema import BenchConfig
from servetune.workload.spec import RequestSpec

Factory = Callable[..., Any]


def _bench(url: str, out: Path, *extra: str) -> Any:
    return run_cli(
        "bench",
        "--base-url",
        url,
        "--num-prompts",
        "30",
        "--request-rate",
        "60",
        "--random-input-len",
        "16",
        "--random-output-len",
        "8",
        "--no-progress",
        "--no-metrics",
        "--result-dir",
        str(out),
        *extra,
    )


def test_defaults_are_vllms(scripted: Factory, tmp_path: Path) -> None:
    srv = scripted({"tpot_ms": 1, "short_output_every": 3})
    p = _bench(srv.base_url, tmp_path)
    assert p.returncode == 0, p.stderr
    # vLLM prints TTFT, TPOT and ITL with their mean, median and P99 — and no E2E block
    for line in ("P99 TTFT (ms)", "P99 TPOT (ms)", "P99 ITL (ms)", "Mean / median ITL"):
        assert line in p.stdout, line
    assert "End-to-end latency" not in p.stdout and "P90" not in p.stdout
    # ignore_eos off (vLLM's default): outputs that stopped early are counted and shown
    assert "Outputs shorter than asked" in p.stdout and "10 of 30" in p.stdout
    data = json.loads((tmp_path / "run.json").read_text())
    assert data["config"]["ignore_eos"] is False
    assert data["config"]["percentile_metrics"] == ["ttft", "tpot", "itl"]
    assert data["config"]["metric_percentiles"] == [99.0]
    assert set(data["summary"]["percentiles"]) == {"ttft", "tpot", "itl"}
    assert data["summary"]["short_outputs"] == 10
    assert data["p99_ttft_ms"] == data["summary"]["percentiles"]["ttft"]["99"]


def test_chosen_metrics_and_percentiles(scripted: Factory, tmp_path: Path) -> None:
    srv = scripted({"tpot_ms": 1})
    p = _bench(
        srv.base_url,
        tmp_path,
        "--percentile-metrics",
        "ttft,e2el",
        "--metric-percentiles",
        "25,50,99.9",
    )
    assert p.returncode == 0, p.stderr
    for line in ("P25 TTFT (ms)", "P50 TTFT (ms)", "P99.9 TTFT (ms)", "P99.9 E2EL (ms)"):
        assert line in p.stdout, line
    assert "Inter-token latency" not in p.stdout and "Time per output token" not in p.stdout
    data = json.loads((tmp_path / "run.json").read_text())
    for key in ("p25_ttft_ms", "p50_ttft_ms", "p99.9_ttft_ms", "p25_e2el_ms", "p99.9_e2el_ms"):
        assert isinstance(data[key], float), key
    assert data["p25_ttft_ms"] <= data["p50_ttft_ms"] <= data["p99.9_ttft_ms"]


@pytest.mark.parametrize(
    ("flag", "value", "needle"),
    [
        ("--percentile-metrics", "ttft,latency", "unknown metric 'latency'"),
        ("--metric-percentiles", "50,abc", "'abc' is not a number"),
        ("--metric-percentiles", "0", "not a percentile in (0, 100]"),
        ("--metric-percentiles", "101", "not a percentile in (0, 100]"),
        ("--max-failure-rate", "1.5", "outside 0–1"),
    ],
)
def test_bad_values_are_clear_errors(
    scripted: Factory, tmp_path: Path, flag: str, value: str, needle: str
) -> None:
    srv = scripted({})
    p = _bench(srv.base_url, tmp_path / "r", f"{flag}={value}")
    assert p.returncode == 2, p.stdout + p.stderr
    assert "Traceback" not in p.stderr and needle in p.stderr, p.stderr
    assert not (tmp_path / "r").exists()


def test_ignore_eos_goes_in_the_body_only_when_asked() -> None:
    spec = RequestSpec(prompt="hello", input_len=1, output_len=8)
    cfg = BenchConfig()
    assert not cfg.ignore_eos
    assert "ignore_eos" not in orjson.loads(build_body(spec, "m", "completions", cfg.ignore_eos))
    assert orjson.loads(build_body(spec, "m", "completions", True))["ignore_eos"] is True


def test_summary_percentiles_follow_numpy_as_vllm_does() -> None:
    ttfts = [float(v) for v in range(1, 101)]
    recs = [
        RequestRecord(
            id=i,
            status="ok",
            scheduled_ns=i * 1_000_000,
            eligible_ns=i * 1_000_000,
            send_ns=i * 1_000_000,
            first_ns=i * 1_000_000 + int(t * 1e6),
            last_ns=i * 1_000_000 + int(t * 1e6) + 5_000_000,
            end_ns=i * 1_000_000 + int(t * 1e6) + 5_000_000,
            chunk_ns=[i * 1_000_000 + int(t * 1e6), i * 1_000_000 + int(t * 1e6) + 5_000_000],
            planned_input_len=4,
            planned_output_len=2,
            output_tokens=2,
            tokens_source="usage",
        )
        for i, t in enumerate(ttfts)
    ]
    s = summarize(recs, percentile_metrics=["ttft", "itl"], metric_percentiles=[25.0, 99.9])
    assert s.percentiles["ttft"]["25"] == pytest.approx(float(np.percentile(ttfts, 25)))
    assert s.percentiles["ttft"]["99.9"] == pytest.approx(float(np.percentile(ttfts, 99.9)))
    assert s.percentiles["itl"]["25"] == pytest.approx(5.0)
    assert set(s.percentiles) == {"ttft", "itl"}
