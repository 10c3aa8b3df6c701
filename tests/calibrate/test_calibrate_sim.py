"""`servetune sim calibrate` against a deployment whose truth is known: a simulated engine
running with constants unlike the catalog's (a "truth" profile), swept, then calibrated from
its runs alone. The fit must predict what it never saw — a held-out level, another
--max-num-seqs, another length mix — and say what the runs could not identify; bad evidence
is refused with its reason; and every planning path takes the profile and records it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servetune.cli import main
from servetune.errors import ServetuneError
from servetune.results.calibration_file import (
    Calibration,
    CalibrationProfile,
    Deployment,
    DeviceSpec,
    read_calibration,
    write_calibration,
)
from servetune.results.io import read_run_result

MODEL = "Qwen/Qwen2.5-7B-Instruct"
GPU = "A100-80GB"
TRUTH = {
    "mfu": 0.41,
    "mbu": 0.62,
    "step_overhead_ms": 6.5,
    "per_seq_overhead_us": 140.0,
    "frontend_latency_ms": 9.0,
    "frontend_per_request_ms": 5.787,
    "frontend_per_token_us": 0.0,
}
"""Unlike the catalog's A100 constants (mfu 0.58, mbu 0.85, 2.5 ms, 55 µs, 22 ms)."""

SEED = "1"
"""The truth's prompts and arrivals, fixed: a sweep without --seed draws one, and the fit's
held-out error is a property of the draw. Over seeds 1-8 the long-prompt mix's mean TTFT
came out within 1-5% (seed 1: -4.7%); an unseeded draw reached -10.3% and -14.6% (one fitted
the prefill rate 8% high), which failed CI at random. Seeded, the test fails only on a change."""

WORKLOAD = [
    "--random-input-len",
    "512",
    "--random-output-len",
    "128",
    "--random-range-ratio",
    "0.5",
]


def truth_profile(path: Path) -> Path:
    dep = Deployment(
        engine="vllm",
        model=MODEL,
        device=DeviceSpec(name=GPU, peak_tflops=312.0, memory_gb_s=2039.0, memory_gib=79.2),
        knobs={"max_num_seqs": 32, "max_model_len": 8192},
    )
    prof = CalibrationProfile(calibration=Calibration(id="truth", deployment=dep, constants=TRUTH))
    return write_calibration(path, prof)


def sim(*args: str) -> None:
    assert main([*args, "--no-progress"]) == 0


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("truth")
    truth = truth_profile(d / "truth.json")
    common = ["--calibration", str(truth), *WORKLOAD]
    sim(
        "sweep",
        "--sim-offline",
        *common,
        "--request-rates",
        "2,4,6,8,20",
        "--num-prompts",
        "300",
        "--seed",
        SEED,
        "--result-dir",
        str(d / "sweep"),
        "--no-report",
    )
    # questions for the profile: another cap, another mix
    sim(
        "sim",
        "run",
        *common,
        "--max-num-seqs",
        "8",
        "--request-rate",
        "6",
        "--seed",
        SEED,
        "--num-prompts",
        "300",
        "--result-dir",
        str(d / "seqs8"),
    )
    sim(
        "sim",
        "run",
        "--calibration",
        str(truth),
        "--random-input-len",
        "1536",
        "--random-output-len",
        "48",
        "--request-rate",
        "3",
        "--seed",
        "4",
        "--num-prompts",
        "300",
        "--result-dir",
        str(d / "mix"),
    )
    return {"truth": truth, "sweep": d / "sweep", "seqs8": d / "seqs8", "mix": d / "mix", "dir": d}


def test_calibrate_predicts_what_it_did_not_fit(
    measured: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    out = measured["dir"] / "fitted.json"
    code = main(
        [
            "sim",
            "calibrate",
            str(measured["sweep"]),
            str(measured["seqs8"]),
            str(measured["mix"]),
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    text = capsys.readouterr().out
    assert code == 0, text
    prof = read_calibration(out)
    roles = {e.label: e.role for e in prof.evidence}
    assert roles["seqs8"] == "held_out" and roles["mix"] == "held_out", roles
    assert sum(r == "held_out" for r in roles.values()) == 3, roles  # + an interior level
    for e in prof.errors:
        for f in ("output_throughput", "mean_ttft_ms", "mean_tpot_ms"):
            err = e.error[f]
            limit = 0.05 if e.role == "fit" else 0.10
            assert err is not None and abs(err) < limit, (e.label, f, err, text)
    assert prof.held_out["output_throughput"] is not None
    # the prefill's rate is identified near the truth (the long-prompt run needs it), with a
    # standard error; the per-token cost of the API server is not exercised (0 in the truth)
    got = {c.name: c for c in prof.fitted}
    assert got["mfu"].how == "fitted" and abs(got["mfu"].value / TRUTH["mfu"] - 1) < 0.10, got
    assert got["mfu"].std_error is not None and got["mfu"].std_error < 0.1 * got["mfu"].value
    assert got["per_seq_overhead_us"].how == "fitted", got
    assert "frontend_per_token_us" in prof.unidentified, prof.unidentified
    # printed: in-sample next to held-out
    assert "median |error| in-sample" in text and "median |error| held out" in text
    assert "profile:" in text


def test_profile_is_used_by_sim_run_and_recorded(measured: dict[str, Path], tmp_path: Path) -> None:
    prof = measured["truth"]
    sim(
        "sim",
        "run",
        "--calibration",
        str(prof),
        *WORKLOAD,
        "--num-prompts",
        "50",
        "--max-num-seqs",
        "64",
        "--result-dir",
        str(tmp_path / "r"),
    )
    run = read_run_result(tmp_path / "r")
    info = run.target.simulated or {}
    assert info["calibration"]["id"] == "truth"
    assert info["gpu"] == GPU and info["model"] == MODEL  # the deployment's, unset flags
    assert info["max_model_len"] == 8192  # the deployment's knob
    # 64 running was never measured (the truth profile's range is empty: no warning) — a
    # fitted profile's range is, and says so
    fitted = measured["dir"] / "fitted.json"
    if fitted.exists():
        sim(
            "sim",
            "run",
            "--calibration",
            str(fitted),
            *WORKLOAD,
            "--num-prompts",
            "50",
            "--max-num-seqs",
            "256",
            "--result-dir",
            str(tmp_path / "r2"),
        )
        warned = read_run_result(tmp_path / "r2").warnings
        assert any("extrapolated" in w for w in warned), warned


def test_runs_that_cannot_inform_a_fit_are_refused(
    measured: dict[str, Path], tmp_path: Path
) -> None:
    from servetune.calibrate import calibrate

    # a run whose requests mostly fail: prompts longer than the context they are sent to
    args = ["sim", "run", "--calibration", str(measured["truth"]), *WORKLOAD]
    args += ["--num-prompts", "40", "--max-model-len", "600"]
    code = main([*args, "--result-dir", str(tmp_path / "fails"), "--no-progress"])
    assert code == 1  # the run itself fails: above its failure threshold
    with pytest.raises(ServetuneError) as exc:
        calibrate([tmp_path / "fails"])
    assert exc.value.code == "calibrate.no_evidence"
    assert "failed" in exc.value.message or "finished" in exc.value.message
    with pytest.raises(ServetuneError) as exc:
        calibrate([tmp_path / "nothing-here"])
    assert exc.value.code == "calibrate.bad_input"


def test_runs_of_two_deployments_are_refused(measured: dict[str, Path], tmp_path: Path) -> None:
    from servetune.calibrate import calibrate

    sim(
        "sim",
        "run",
        "--gpu",
        "H100-SXM",
        "--model",
        MODEL,
        *WORKLOAD,
        "--num-prompts",
        "60",
        "--result-dir",
        str(tmp_path / "h100"),
    )
    with pytest.raises(ServetuneError) as exc:
        calibrate([measured["seqs8"], tmp_path / "h100"])
    assert exc.value.code == "calibrate.mixed"


def test_a_profile_file_that_is_not_one_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "calibration.json"
    bad.write_text(json.dumps({"kind": "run", "schema_version": 1}))
    code = main(
        [
            "sim",
            "run",
            "--calibration",
            str(bad),
            "--num-prompts",
            "5",
            "--result-dir",
            str(tmp_path / "x"),
            "--no-progress",
        ]
    )
    assert code == 2
