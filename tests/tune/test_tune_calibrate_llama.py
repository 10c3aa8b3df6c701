"""``tune --calibrate`` on the real llama.cpp server: the simulator is refitted on the
trials' probes as they run, its profile predicts the trials after it (their SLO-max search
starts there), its best untried configurations are queued next, and tune.json says how close
its predictions came against the catalog's — measured on trials each profile had not seen.

The figures are printed, not asserted: on a shared 2-core box a trial's SLO-max moves by a
third between repeats, which is the scale of the errors judged here. What is asserted is the
loop: refits that succeed, predictions made by a profile fitted on earlier trials only, the
profile on disk readable by ``--calibration``, queued configurations, and a gain record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.needs import need

from servetune.calibrate import load_calibration
from servetune.cli import main
from servetune.engines import provisioned

pytestmark = [pytest.mark.real_engine, pytest.mark.timeout(1800)]


def test_tune_calibrates_the_simulator_as_it_goes_on_llama_cpp(tmp_path: Path) -> None:
    exe = provisioned.llama_server_binary()
    tiny = provisioned.tiny_model()
    how = "run `bash scripts/provision_engines.sh` (`make test` runs it)"
    need("llama-server", exe, how)
    need("the tiny test model", tiny, how)
    assert exe is not None and tiny is not None
    out = tmp_path / "tune"
    args = [
        "tune", "--engine", "llama.cpp", "--model", str(tiny.small_gguf),
        "--sim-model", str(tiny.small_hf_dir), "--executable", str(exe),
        "--knob", "max_num_seqs=1,2,4,8",
        "--random-input-len", "64", "--random-output-len", "32", "--num-prompts", "40",
        "--tokenizer", str(tiny.hf_dir), "--seed", "5", "--slo", "ttft:p90<=2000",
        "--trials", "4", "--repeats", "1", "--probes", "3", "--no-ofat", "--calibrate",
        "--result-dir", str(out),
    ]  # fmt: skip
    code = main(args)
    r = json.loads((out / "tune.json").read_text())
    assert code == 0, r["verdict"]
    steps = r["calibration_steps"]
    fitted = [s for s in steps if s["error"] is None]
    print("refits:", [(s["after_trial"], s["runs"], s["error"]) for s in steps])
    assert fitted, steps
    assert all(s["runs"] >= 2 and s["constants"] for s in fitted)
    # the profile on disk is the last refit's, and --calibration reads it
    prof = load_calibration(out / "calibration.json")
    assert prof.deployment.device.kind == "cpu"
    # trials after the first refit were predicted by a profile fitted on earlier trials only
    first = fitted[0]["after_trial"]
    later = [t for t in r["trials"] if t["number"] > first and t["status"] != "duplicate"]
    predicted = [t for t in later if t["calibrated_on"]]
    for t in predicted:
        assert t["predicted"] is not None
        assert t["calibrated_on"] <= sum(1 for u in r["trials"] if u["number"] < t["number"])
    print(
        "predictions:",
        [(t["number"], t["predicted"], t["predicted_catalog"], t["slo_max"]) for t in later],
    )
    queued = [c for s in fitted for c in s["enqueued"]]
    assert queued, "the calibrated simulator queued nothing"
    gain = r["calibration_gain"]
    print("calibration gain:", gain)
    if predicted and any(t["status"] == "ok" and t["slo_max"] for t in predicted):
        assert gain is not None and gain["trials"] >= 1
