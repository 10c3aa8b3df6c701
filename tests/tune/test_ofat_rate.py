"""The one-knob-at-a-time table is measured at the rate the best held in every repeat: at the
median of its repeats — a rate one draw of the workload may not hold — the table showed the
best itself missing the SLOs right under "Best: … within the SLOs"."""

from __future__ import annotations

from pathlib import Path

import pytest

from servetune.cli import main
from servetune.results.tune_file import read_tune_result


def test_the_best_meets_its_slos_in_its_own_ofat_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "t"
    args = ["tune", "--engine", "sim", "--gpu", "H100-SXM"]
    args += ["--model", "meta-llama/Llama-3.1-8B-Instruct"]
    args += ["--random-input-len", "512", "--random-output-len", "256"]
    args += ["--slo", "ttft:p99<=300", "--slo", "tpot:p99<=30"]
    args += ["--trials", "12", "--num-prompts", "300", "--seed", "5", "--result-dir", str(out)]
    assert main(args) == 0
    text = capsys.readouterr().out
    r = read_tune_result(out / "tune.json")
    assert r.best is not None and r.ofat
    rep = next(x for x in r.repeats if x.params == r.best.params)
    # this study's best held different rates in different draws (15.2, 17.6, 17 req/s)
    assert min(rep.measured) < (rep.median or 0.0)
    # ... and no higher than the rate it held on the longer probe (tests/tune/test_sustained.py)
    held = next(c for c in r.confirmations if c.params == r.best.params)
    assert held.sustained is not None
    assert r.ofat_rate == pytest.approx(min(*rep.measured, held.sustained))
    best_row = next(o for o in r.ofat if o.direction == "best")
    assert best_row.status == "meets SLOs", best_row
    assert "the rate it held in every repeat" in text
