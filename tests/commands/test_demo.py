"""``servetune demo`` (what `make demo` runs): the whole procedure, end to end, on the simulated
engine — each step said, each file written, and the figures that close it consistent with them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from servetune.cli import main
from servetune.results.io import read_run_result
from servetune.results.sweep_schema import read_sweep_result


def test_demo_runs_the_whole_procedure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "demo"
    code = main(
        ["demo", "--num-prompts", "60", "--realtime-seconds", "1", "--result-dir", str(out)]
    )
    text = capsys.readouterr().out
    assert code == 0, text
    for step in (
        "== 1. Baseline configuration",
        "== 2. Saturation probe",
        "== 3. Rate sweep",
        "== 4. One level in real time",
        "== 5. The knee",
        "== 6. Report",
    ):
        assert step in text

    probe = read_run_result(out / "probe")
    assert probe.summary.completed == 60 and probe.target.simulated is not None
    sweep = read_sweep_result(out / "sweep")
    assert sweep.status == "complete"
    loads = [r.load for r in sweep.measured_rows()]
    assert {8.0, 16.0, 32.0, 64.0, 128.0} <= set(loads)  # the seed's levels, plus brackets
    assert sweep.knee is not None and sweep.knee.status == "found"
    assert (out / "sweep" / "report.html").is_file()
    live = read_run_result(out / "realtime")
    assert live.summary.completed >= 20 and live.summary.failed == 0
    assert live.target.base_url.startswith("http://127.0.0.1:")

    # the closing lines agree with the files
    knee = re.search(r"^knee: ≈([\d.]+) req/s served, ([\d.]+) req/s offered", text, re.M)
    assert knee is not None and sweep.knee.throughput is not None
    assert float(knee.group(1)) == pytest.approx(sweep.knee.throughput, abs=0.005)
    assert float(knee.group(2)) == pytest.approx(sweep.knee.offered, abs=0.005)
    # one figure for the knee in the whole output: the step, the diagnosis and this line
    assert f"≈{sweep.knee.throughput:.2f} req/s" in text.split("== 6.")[0]
    assert re.search(r"^comfortable concurrency: ≈\d+ requests in flight", text, re.M)
    assert re.search(r"^diagnosis: \S", text, re.M)
    assert f"report: {(out / 'sweep' / 'report.html').resolve()}" in text


@pytest.mark.parametrize("seconds", ["-1", "nan"])
def test_a_real_time_length_that_is_none_is_refused(
    seconds: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """-1 and NaN skipped the real-time level without a word (only 0 means skip)."""
    out = tmp_path / "demo"
    assert main(["demo", "--realtime-seconds", seconds, "--result-dir", str(out)]) == 2
    assert "--realtime-seconds must be ≥ 0" in capsys.readouterr().err
    assert not out.exists()


def test_a_second_demo_into_the_same_folder_is_refused_before_it_writes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It replaced the first demo's probe, then stopped at the sweep with the hint 'pass
    --resume', a flag demo does not have."""
    out = tmp_path / "demo"
    (out / "probe").mkdir(parents=True)
    (out / "probe" / "run.json").write_text("{}")
    assert main(["demo", "--result-dir", str(out)]) == 2
    err = capsys.readouterr().err
    assert "already holds a demo (probe)" in err and "--resume" not in err
    assert (out / "probe" / "run.json").read_text() == "{}"
