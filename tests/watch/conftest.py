"""Fixtures of the watch and export tests (helpers: watch_fixtures.py)."""

from __future__ import annotations

import shutil

import pytest


@pytest.fixture
def needs_prometheus() -> None:
    from needs import SYSTEM_DEPS, need

    need(
        "prometheus and promtool",
        shutil.which("prometheus") and shutil.which("promtool"),
        SYSTEM_DEPS,
    )
