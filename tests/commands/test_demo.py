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
