"""Shared results for the cost tests: one simulated run and one offline sweep, made once, each
with a fixed seed (a run draws a fresh one by default) so that a failure can be repeated."""

from __future__ import annotations

from pathlib import Path

import pytest

from servetune.cli import main


@pytest.fixture(scope="session")
def sim_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cost") / "run"
    code = main(
        [
            "sim", "run", "--request-rate", "6", "--num-prompts", "200",
            "--random-input-len", "1024", "--random-output-len", "128",
            "--seed", "7", "--result-dir", str(out), "--no-progress",
        ]
    )  # fmt: skip
    assert code == 0
    return out


@pytest.fixture(scope="session")
def sim_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cost") / "sweep"
    code = main(
        [
            "sweep", "--sim-offline", "--request-rates", "2,4,6,8,10,12,16",
            "--num-prompts", "300", "--seed", "7", "--result-dir", str(out), "--no-report",
            "--no-progress",
        ]
    )  # fmt: skip
    assert code == 0
    return out
