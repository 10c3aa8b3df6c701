"""Synthetic run and sweep directories for the report tests (a closed-form engine model)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cdp_browser import find_chromium

from needs import SYSTEM_DEPS, need
from servetune.results.schema import BenchConfig, Slo
from servetune.results.sweep_schema import SweepConfig
from servetune.sweep.runner import run_sweep
from servetune.sweep.synthetic import SyntheticEngine

RATES = [2.0, 4.0, 8.0, 12.0, 16.0, 32.0]


@pytest.fixture(scope="session")
def sweep_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("report") / "sweep"
    cfg = SweepConfig(
        bench=BenchConfig(num_prompts=150, goodput=Slo(ttft=500, e2el=4000)),
        mode="rate",
        request_rates=RATES,
    )
    run_sweep(cfg, d, SyntheticEngine(), echo=lambda _m: None)
    return d


@pytest.fixture(scope="session")
def chromium() -> str:
    """The headless Chromium the browser tests drive (scripts/ci-system-deps.sh installs it)."""
    path = find_chromium()
    need("headless Chromium", path, SYSTEM_DEPS)
    assert path is not None
    return path
