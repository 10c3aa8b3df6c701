"""`servetune plan --calibration PROFILE`: every candidate simulated with the profile's
constants (a profile unlike the catalog's changes the capacities), plan.json records which
profile, and a candidate on another GPU than the profile's says its constants were
transferred."""

from __future__ import annotations

from pathlib import Path

import pytest

from servetune.cli import main
from servetune.errors import ResultError
from servetune.results.calibration_file import (
    Calibration,
    CalibrationProfile,
    Deployment,
    DeviceSpec,
    write_calibration,
)
from servetune.results.plan_file import read_plan_result

SLOW = {"mfu": 0.41, "mbu": 0.42, "step_overhead_ms": 6.5, "per_seq_overhead_us": 140.0}
"""Far below the catalog's A100 constants (mfu 0.58, mbu 0.85, 2.5 ms, 55 µs)."""

PLAN = [
    "plan",
    "--peak-rate",
    "4",
    "--slo",
    "ttft:1000",
    "tpot:60",
    "--input-len",
    "512",
    "--output-len",
    "128",
    "--tp",
    "1",
    "--quantizations",
    "auto",
    "--knob-set",
    "default",
    "--requests-per-point",
    "200",
    "--top",
    "2",
    "--workers",
    "1",
    "--no-progress",
]


def slow_profile(path: Path) -> Path:
    dep = Deployment(
        engine="vllm",
        model="Qwen/Qwen2.5-7B-Instruct",
        device=DeviceSpec(name="A100-80GB", peak_tflops=312.0, memory_gb_s=2039.0, memory_gib=79.2),
    )
    cal = Calibration(id="slow", deployment=dep, constants=SLOW)
    return write_calibration(path, CalibrationProfile(calibration=cal))


def test_plan_with_a_profile(tmp_path: Path) -> None:
    prof = slow_profile(tmp_path / "slow.json")
    gpus = ["--gpus", "A100-80GB,H100-SXM"]
    assert main([*PLAN, *gpus, "-o", str(tmp_path / "base.json")]) == 0
    cal_out = tmp_path / "cal" / "plan.json"
    assert main([*PLAN, *gpus, "--calibration", str(prof), "-o", str(cal_out)]) == 0
    base, cal = read_plan_result(tmp_path / "base.json"), read_plan_result(cal_out)
    assert base.calibration is None
    assert cal.calibration is not None and cal.calibration.id == "slow"
    assert cal.calibration.file == str(prof.resolve())
    assert cal.calibration.constants["mbu"] == 0.42

    def rate(res: object, gpu: str) -> float:
        (c,) = [c for c in res.candidates if c.gpu == gpu]  # type: ignore[attr-defined]
        assert c.slo_max_rate_per_replica is not None
        return float(c.slo_max_rate_per_replica)

    # half the bandwidth, 2.6x the step overhead: a replica holds far less
    assert rate(cal, "A100-80GB") < 0.8 * rate(base, "A100-80GB")
    (a100,) = [c for c in cal.candidates if c.gpu == "A100-80GB"]
    (h100,) = [c for c in cal.candidates if c.gpu == "H100-SXM"]
    assert not any("transferred" in n for n in a100.notes)
    assert any(
        "not H100-SXM: its constants are transferred to another device" in n for n in h100.notes
    )
    assert any("1 of 2 candidates" in w and "another device" in w for w in cal.warnings)
    # the report shows it beside the plan's settings
    assert main(["report", str(cal_out.parent), "--no-png"]) == 0
    html = (cal_out.parent / "report.html").read_text()
    assert ">calibration</div><div>slow (" in html and "mbu=0.42" in html


def test_plan_profile_defaults_to_its_device(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prof = slow_profile(tmp_path / "slow.json")
    out = tmp_path / "plan.json"
    assert main([*PLAN, "--calibration", str(prof), "-o", str(out)]) == 0
    res = read_plan_result(out)
    assert {c.gpu for c in res.candidates} == {"A100-80GB"}
    assert "simulated with calibration slow" in capsys.readouterr().out


def test_plan_bad_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*PLAN, "--calibration", str(tmp_path / "none.json")]) == 2
    err = capsys.readouterr().err
    assert "--calibration" in err and "sim calibrate" in err
    bad = tmp_path / "bad.json"
    bad.write_text('{"kind": "calibration", "schema_version": 1}')
    with pytest.raises(ResultError):
        from servetune.commands._calibration_args import read_profile

        read_profile(bad)
