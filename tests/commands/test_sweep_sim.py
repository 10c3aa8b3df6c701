"""The sweep on the simulated engine: on the virtual clock (offline) and in real time
(the embedded OpenAI-compatible server, scraped like a real vLLM)."""

from __future__ import annotations

from pathlib import Path

import pytest

from servetune.cli import main
from servetune.results.io import SERVER_METRICS_FILE
from servetune.results.sweep_schema import read_sweep_result

pytest.importorskip("servetune.sim.offline")

SIM = ["--model", "Qwen2.5-7B-Instruct", "--gpu", "A100-80GB", "--max-model-len", "8192"]


def test_offline_sweep_finds_the_knee_and_agrees_with_the_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "sweep",
            "--sim-offline",
            *SIM,
            "--request-rates",
            "2,4,6,8,10,12,16,24,32",
            "--num-prompts",
            "300",
            "--random-input-len",
            "512",
            "--random-output-len",
            "128",
            "--goodput",
            "ttft:1000",
            "--result-dir",
            str(tmp_path),
            "--no-report",
            "--no-progress",
        ]
    )
    assert code == 0, capsys.readouterr().err
    sweep = read_sweep_result(tmp_path)
    assert sweep.config.target == "offline" and sweep.config.engine is not None
    rows = sweep.measured_rows()
    assert len(rows) == 9
    for row in rows:
        assert (tmp_path / row.level_dir / SERVER_METRICS_FILE).exists()
        assert row.server is not None and row.server.running_mean is not None
    knee = sweep.knee
    assert knee is not None and knee.status == "found", knee and knee.verdict
    assert knee.concurrency is not None and knee.concurrency_server is not None
    # Little's law from the client's figures and the engine's own running count agree.
    assert knee.concurrency_server == pytest.approx(knee.concurrency, rel=0.3)
    assert sweep.slo_max is not None and sweep.slo_max.status in ("found", "all_meet")


def test_realtime_sweep_on_the_embedded_engine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("servetune.sim.embedded")
    code = main(
        [
            "sweep",
            *SIM,
            "--request-rates",
            "4,8",
            "--num-prompts",
            "16",
            "--random-input-len",
            "128",
            "--random-output-len",
            "16",
            "--metrics-interval",
            "0.5",
            "--result-dir",
            str(tmp_path),
            "--no-report",
            "--no-progress",
        ]
    )
    assert code == 0, capsys.readouterr().err
    sweep = read_sweep_result(tmp_path)
    assert sweep.config.target == "embedded" and sweep.config.bench.base_url is None
    rows = sweep.measured_rows()
    assert [r.label for r in rows] == ["rate-4", "rate-8"]
    assert all(r.completed == 16 for r in rows)
    assert any(r.server is not None and r.server.samples > 0 for r in rows)
    # Resuming a finished real-time sweep runs nothing and keeps the same levels, although
    # the embedded engine listens on another port now.
    capsys.readouterr()
    code = main(
        [
            "sweep",
            *SIM,
            "--request-rates",
            "4,8",
            "--num-prompts",
            "16",
            "--random-input-len",
            "128",
            "--random-output-len",
            "16",
            "--metrics-interval",
            "0.5",
            "--result-dir",
            str(tmp_path),
            "--no-report",
            "--no-progress",
            "--resume",
        ]
    )
    assert code == 0
    assert capsys.readouterr().err.count("reused") == 2
