"""Fixtures of the diagnose tests: the simulated scenarios, run once per session."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from dx_scenarios import SCENARIOS, run_scenario


@pytest.fixture(scope="session")
def scenario_dir(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """scenario name → its run directory (simulated on first use)."""
    base = tmp_path_factory.mktemp("dx-scenarios")
    done: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in done:
            assert name in SCENARIOS, name
            run_scenario(name, base / name, base)
            done[name] = base / name
        return done[name]

    return get


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("dx-data")
