"""`servetune tune --calibration PROFILE`: the simulated engine's trials run with the profile's
constants (a profile unlike the catalog's changes the SLO-max measured), tune.json records
which profile, a GPU other than the profile's is noted as a transfer, and what cannot take a
profile is refused."""

from __future__ import annotations

import json
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

SLOW = {"mfu": 0.41, "mbu": 0.42, "step_overhead_ms": 6.5, "per_seq_overhead_us": 140.0}
"""Far below the catalog's A100 constants (mfu 0.58, mbu 0.85, 2.5 ms, 55 µs)."""

TUNE = [
    "tune",
    "--engine",
    "sim",
    "--num-prompts",
    "200",
    "--probes",
    "6",
    "--seed",
    "1",
    "--random-input-len",
    "512",
    "--random-output-len",
    "128",
    "--slo",
    "ttft:1000",
    "--slo",
    "tpot:60",
    "--knob",
    "max_num_seqs=32,64",
    "--trials",
    "2",
    "--repeats",
    "1",
    "--top-k",
    "1",
    "--no-ofat",
]


def slow_profile(path: Path) -> Path:
    dep = Deployment(
        engine="vllm",
        model="Qwen/Qwen2.5-7B-Instruct",
        device=DeviceSpec(name="A100-80GB", peak_tflops=312.0, memory_gb_s=2039.0, memory_gib=79.2),
    )
    cal = Calibration(id="slow", deployment=dep, constants=SLOW)
    return write_calibration(path, CalibrationProfile(calibration=cal))


def default_value(out: Path) -> tuple[float, dict]:
    r = json.loads((out / "tune.json").read_text())
    assert r["default"] is not None and r["default"]["value"] is not None
    return float(r["default"]["value"]), r


def test_tune_with_a_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prof = slow_profile(tmp_path / "slow.json")
    assert main([*TUNE, "--gpu", "A100-80GB", "--result-dir", str(tmp_path / "base")]) == 0
    assert main([*TUNE, "--calibration", str(prof), "--result-dir", str(tmp_path / "cal")]) == 0
    text = capsys.readouterr().out
    base, _ = default_value(tmp_path / "base")
    cal, r = default_value(tmp_path / "cal")
    # unset --gpu took the profile's device; half the bandwidth: far less traffic held
    assert r["spec"]["gpu"] == "A100-80GB"
    assert cal < 0.8 * base, (cal, base)
    ref = r["spec"]["calibration_ref"]
    assert ref["id"] == "slow" and ref["file"] == str(prof.resolve())
    assert r["spec"]["calibration"]["constants"]["mbu"] == 0.42
    assert "simulated with calibration slow" in text
    assert not any("transferred" in w for w in r["warnings"])
    assert main(["report", str(tmp_path / "cal"), "--no-png"]) == 0
    html = (tmp_path / "cal" / "report.html").read_text()
    assert ">calibration</div><div>slow (" in html and "mbu=0.42" in html


def test_tune_profile_on_another_gpu_is_noted(tmp_path: Path) -> None:
    prof = slow_profile(tmp_path / "slow.json")
    out = tmp_path / "h100"
    args = [*TUNE, "--calibration", str(prof), "--gpu", "H100-80GB", "--result-dir", str(out)]
    assert main(args) == 0
    _, r = default_value(out)
    assert any(
        "not H100-SXM: its constants are transferred to another device" in w for w in r["warnings"]
    )


def test_tune_profile_refusals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*TUNE, "--calibration", str(tmp_path / "none.json")]) == 2
    err = capsys.readouterr().err
    assert "--calibration" in err and "sim calibrate" in err
    prof = slow_profile(tmp_path / "slow.json")
    assert main([*TUNE, "--calibration", str(prof), "--realtime"]) == 2
    assert "--realtime" in capsys.readouterr().err
