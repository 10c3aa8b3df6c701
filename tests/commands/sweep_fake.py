"""Level runners for tests that run ``servetune sweep`` in a subprocess (--level-runner)."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from servetune.results.schema import BenchConfig, RunResult
from servetune.sweep.synthetic import SyntheticEngine

fast_level = SyntheticEngine()
slow_level = SyntheticEngine(wall_sleep_s=0.7)
"""Writes requests.jsonl, sleeps 0.7 s, then run.json: a kill can land mid-level."""


def pid_level(cfg: BenchConfig, level_dir: Path) -> RunResult:
    """Asks the server under test who it is (its PID), then runs a synthetic level."""
    assert cfg.base_url is not None
    with urllib.request.urlopen(cfg.base_url.rstrip("/") + "/models", timeout=5) as resp:
        body = json.loads(resp.read())
    level_dir.mkdir(parents=True, exist_ok=True)
    (level_dir / "server_pid").write_text(str(body["pid"]))
    return fast_level(cfg, level_dir)
