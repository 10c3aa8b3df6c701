"""`servetune cost --calibration PROFILE`: the profile names the deployment a real server's
run does not (its GPU type and count, its model), its measured compute efficiency is what the
compute load is a share of (a profile unlike the catalog's changes that figure), cost.json
records which profile, and one measured on another GPU than the result's is said so."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from servetune.cli import main
from servetune.results.calibration_file import (
    Calibration,
    CalibrationProfile,
    Deployment,
    DeviceSpec,
    write_calibration,
)

MODEL = "Qwen/Qwen2.5-7B-Instruct"


def profile(path: Path, gpu: str, mfu: float) -> Path:
    dep = Deployment(
        engine="vllm",
        model=MODEL,
        device=DeviceSpec(name=gpu, peak_tflops=312.0, memory_gb_s=2039.0, memory_gib=79.2),
        tensor_parallel_size=2,
    )
    cal = Calibration(id="half", deployment=dep, constants={"mfu": mfu, "mbu": 0.6})
    return write_calibration(path, CalibrationProfile(calibration=cal))


def _real(sim_run: Path, tmp_path: Path) -> Path:
    real = tmp_path / "real"
    shutil.copytree(sim_run, real)
    run = json.loads((real / "run.json").read_text())
    run["target"]["simulated"] = None  # a real server's run: no GPU recorded
    (real / "run.json").write_text(json.dumps(run))
    return real


def test_cost_with_a_profile(
    sim_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    real = _real(sim_run, tmp_path)
    prof = profile(tmp_path / "half.json", "A100-80GB", 0.29)  # the catalog's A100: 0.58
    flags = ["--gpu", "A100-80GB", "--gpus", "2", "--model", MODEL, "--json", "--no-write"]
    assert main(["cost", str(real), *flags]) == 0
    base = json.loads(capsys.readouterr().out)
    assert main(["cost", str(real), "--calibration", str(prof), "--json", "--no-write"]) == 0
    doc = json.loads(capsys.readouterr().out)
    # the deployment is the profile's: same GPUs, same price
    assert doc["gpu"] == "A100-80GB" and doc["gpu_count"] == 2
    assert "calibration profile" in doc["gpu_count_source"]
    assert doc["usd_per_hour"] == pytest.approx(base["usd_per_hour"])
    # the compute load is a share of the measured 0.29, not the catalog's 0.58: twice the share
    (b,), (c,) = base["levels"], doc["levels"]
    assert b["compute_use"] is not None and c["compute_use"] is not None
    assert c["compute_use"] == pytest.approx(2 * b["compute_use"], rel=1e-6)
    assert doc["compute_ceiling"] == 0.29 and base["compute_ceiling"] is None
    assert doc["calibration"]["id"] == "half"
    assert doc["calibration"]["file"] == str(prof.resolve())
    assert base["calibration"] is None
    assert main(["cost", str(real), "--calibration", str(prof)]) == 0
    assert "calibration half" in capsys.readouterr().out
    # the report shows it in the run's cost section
    assert main(["report", str(real), "--no-png"]) == 0
    html = (real / "report.html").read_text()
    assert "calibration half (<code>" in html and "measured compute efficiency 29%" in html


def test_cost_profile_of_another_gpu(
    sim_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prof = profile(tmp_path / "h100.json", "H100-SXM", 0.3)
    # the simulated run records its A100: the result wins, the profile's efficiency is not its
    assert main(["cost", str(sim_run), "--calibration", str(prof), "--json", "--no-write"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["gpu"] == "A100-80GB" and doc["compute_ceiling"] is None
    assert any("measured on H100-SXM, not A100-80GB" in w for w in doc["warnings"])
    assert main(["cost", str(sim_run), "--calibration", str(tmp_path / "none.json")]) == 2
    err = capsys.readouterr().err
    assert "--calibration" in err and "sim calibrate" in err
