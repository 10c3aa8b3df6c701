"""`servetune cost` end to end on simulated results: the table, the JSON, the file, errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from servetune.cli import main
from servetune.results.cost_file import read_cost_report


def test_sweep_json_has_levels_knee_saturation(
    sim_sweep: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["cost", str(sim_sweep), "--price", "A100-80GB=2.0", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "cost" and doc["source_kind"] == "sweep"
    assert doc["usd_per_hour"] == pytest.approx(2.0) and doc["r"] == 4.0
    assert "1/r" not in doc["formula"] and "/ r" in doc["formula"]
    levels = doc["levels"]
    assert len(levels) == 7
    for lv in levels:
        # $/Mtok recomputed from the level's own throughput
        per_s = 2.0 / 3600
        out = per_s / (lv["output_tok_s"] + lv["input_tok_s"] / 4) * 1e6
        assert lv["output_usd_per_mtok"] == pytest.approx(out)
        assert lv["input_usd_per_mtok"] == pytest.approx(out / 4)
    # a token gets cheaper as load rises towards saturation
    blended = [lv["blended_usd_per_mtok"] for lv in levels]
    assert blended[0] > 3 * blended[-1]
    # saturation is the level of highest output throughput (past the knee two levels can be
    # within a token a second of each other: the definition, not a label, is what holds)
    top = max(levels, key=lambda lv: lv["output_tok_s"])
    assert doc["saturation"]["label"] == top["label"] and top["label"] in ("rate-12", "rate-16")
    assert doc["cheapest"]["vs_cheapest"] == pytest.approx(1.0)
    knee = doc["knee"]
    assert knee is not None and knee["label"] == "knee"
    assert knee["vs_cheapest"] >= 1.0 and doc["knee_vs_cheapest"] == knee["vs_cheapest"]
    # the knee lies between the levels that bracket it
    sweep = json.loads((sim_sweep / "sweep.json").read_text())
    a, b = sweep["knee"]["bracket"]
    by = {lv["label"]: lv for lv in levels}
    lo, hi = sorted([by[a]["blended_usd_per_mtok"], by[b]["blended_usd_per_mtok"]])
    assert lo * 0.98 <= knee["blended_usd_per_mtok"] <= hi * 1.02
    assert (sim_sweep / "cost.json").is_file()
    assert read_cost_report(sim_sweep).knee is not None


def test_run_table_for_people(sim_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cost", str(sim_run), "--no-write"]) == 0
    out = capsys.readouterr().out
    assert "A100-80GB" in out and "runpod" in out and "read 2026" in out
    assert "output $/Mtok" in out and "r = 4" in out
    assert not (sim_run / "cost.json").exists()


def test_spot_pricing_and_r(sim_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cost", str(sim_run), "--pricing", "spot", "--r", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["price"]["pricing"] == "spot" and doc["r"] == 2.0
    lv = doc["levels"][0]
    assert lv["input_usd_per_mtok"] == pytest.approx(lv["output_usd_per_mtok"] / 2)


def test_real_run_needs_the_gpu(
    sim_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    real = tmp_path / "real"
    shutil.copytree(sim_run, real)
    run = json.loads((real / "run.json").read_text())
    run["target"]["simulated"] = None
    (real / "run.json").write_text(json.dumps(run))
    assert main(["cost", str(real)]) == 2
    err = capsys.readouterr().err
    assert "does not say which GPUs" in err and "--gpu" in err
    assert main(["cost", str(real), "--gpu", "L40S", "--gpus", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["gpu"] == "L40S" and doc["gpu_count"] == 2
    assert doc["usd_per_hour"] == pytest.approx(2 * doc["price"]["usd_per_gpu_hour"])
    assert not any("assumed" in w for w in doc["warnings"])
    # --gpu alone: one GPU is an assumption (a TP 4 server would be priced at a quarter), and
    # the output says so instead of "GPUs from --gpu/--gpus"
    assert main(["cost", str(real), "--gpu", "L40S", "--json", "--no-write"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["gpu_count"] == 1 and "one GPU assumed" in doc["gpu_count_source"]
    assert any("--gpus N" in w for w in doc["warnings"])


@pytest.mark.parametrize(
    "extra,needle",
    [
        (["--gpu", "B9000"], "unknown GPU"),
        (["--price", "A100-80GB=free"], "not a number"),
        (["--pricing", "reserved-3y"], "no reserved-3y price"),
        (["--r", "0"], "--r must be > 0 (got 0)"),
    ],
)
def test_bad_input_is_explained(
    sim_run: Path, extra: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["cost", str(sim_run), "--no-write", *extra]) == 2
    assert needle in capsys.readouterr().err


def test_not_a_result_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cost", str(tmp_path)]) == 2
    assert "holds no servetune result" in capsys.readouterr().err


def test_catalog_listing(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cost", "--prices"]) == 0
    out = capsys.readouterr().out
    assert "H100-SXM" in out and "spot" in out and "https://" in out


def test_catalog_listing_of_one_provider(capsys: pytest.CaptureFixture[str]) -> None:
    """--prices --provider was ignored: the whole catalog, and an unknown provider unsaid."""
    assert main(["cost", "--prices", "--provider", "aws"]) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    assert rows and all(r.split()[2] == "aws" for r in rows)
    assert main(["cost", "--prices", "--provider", "nope"]) == 2
    assert "no prices from provider 'nope'" in capsys.readouterr().err


def test_a_run_that_lost_requests_gets_no_load_advice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # prompts up to 1,300 tokens against --max-model-len 1100: about half are refused. The
    # GPU looks idle because those never ran — "more load / a bigger batch" would be advice on
    # the failures; the cost says they were lost and sends to diagnose instead.
    out = tmp_path / "lossy"
    args = ["sim", "run", "--max-model-len", "1100", "--random-input-len", "1000"]
    args += ["--random-range-ratio", "0.3", "--random-output-len", "64", "--request-rate", "4"]
    args += ["--num-prompts", "200", "--result-dir", str(out), "--no-progress"]
    main(args)
    capsys.readouterr()
    run = json.loads((out / "run.json").read_text())
    failed = run["summary"]["failed"]
    assert run["status"] != "complete" and failed > 20
    assert main(["cost", str(out), "--json", "--no-write"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (advice,) = doc["advice"]
    assert f"{failed} of " in advice and "servetune diagnose" in advice
    assert not any("bigger batch" in a or "more load" in a for a in doc["advice"])
    assert any(f"{failed} of " in w and "not counted as served" in w for w in doc["warnings"])


def test_a_level_that_lost_requests_is_not_the_cheapest_point(
    sim_sweep: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the sweep's top level (its cheapest and saturated point) as a real server would leave it
    # past its capacity: a fifth of its requests timed out
    lossy = tmp_path / "sweep"
    shutil.copytree(sim_sweep, lossy)
    doc = json.loads((lossy / "sweep.json").read_text())
    top = next(r for r in doc["rows"] if r["label"] == "rate-16")
    top["status"], top["failed"] = "degraded", top["completed"] // 4
    (lossy / "sweep.json").write_text(json.dumps(doc))
    assert main(["cost", str(lossy), "--json", "--no-write"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["cheapest"]["label"] != "rate-16" and out["saturation"]["label"] != "rate-16"
    assert any("level rate-16 is degraded" in w for w in out["warnings"])
    # it is still listed, with its own figures
    assert "rate-16" in [lv["label"] for lv in out["levels"]]
