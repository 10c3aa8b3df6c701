"""Shared fixtures: real server processes on 127.0.0.1 that stop by themselves."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]


class ScriptedProcess:
    """A running ``python -m servetune.testserver`` and its base URL."""

    def __init__(self, proc: subprocess.Popen[str], port: int) -> None:
        self.proc = proc
        self.port = port
        self.base_url = f"http://127.0.0.1:{port}/v1"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def start_scripted(
    script: dict[str, Any] | None = None, timeout_s: float = 30.0
) -> ScriptedProcess:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "servetune.testserver",
            "--port",
            "0",
            "--script",
            json.dumps(script or {}),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stdout is not None
    import selectors

    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    if not sel.select(timeout_s):
        proc.kill()
        raise RuntimeError("scripted server did not start")
    line = proc.stdout.readline()
    if not line.startswith("READY"):
        proc.kill()
        raise RuntimeError(f"scripted server failed: {line}{proc.stdout.read()}")
    return ScriptedProcess(proc, int(line.split()[1]))


@pytest.fixture
def scripted() -> Iterator[Callable[..., ScriptedProcess]]:
    """Factory: ``scripted({"ttft_ms": 50})`` starts a server, stopped after the test."""
    started: list[ScriptedProcess] = []

    def make(script: dict[str, Any] | None = None) -> ScriptedProcess:
        s = start_scripted(script)
        started.append(s)
        return s

    yield make
    for s in started:
        s.stop()


def run_cli(
    *args: str, timeout: float = 300, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``servetune ARGS`` as a real process."""
    return subprocess.run(
        [sys.executable, "-m", "servetune.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )


@pytest.fixture(scope="session")
def scenario_dir(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """A diagnose scenario's run directory (``tests/diagnose/dx_scenarios.py``), simulated on
    first use and shared by every test of the session (diagnose's and the CLI's)."""
    from tests.diagnose.dx_scenarios import SCENARIOS, run_scenario

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
    """A session folder for the datasets the diagnose scenarios write."""
    return tmp_path_factory.mktemp("dx-data")
