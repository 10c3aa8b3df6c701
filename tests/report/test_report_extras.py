"""The report shows what `servetune cost` and `servetune quality` wrote beside a result."""

from __future__ import annotations

import shutil
from pathlib import Path

from servetune.cli import main
from servetune.report.build import build_report
from servetune.results.quality_file import EndpointInfo, QualityReport, write_quality_report


def test_cost_and_quality_sections(sweep_dir: Path, tmp_path: Path) -> None:
    d = tmp_path / "sweep"
    shutil.copytree(sweep_dir, d)
    assert main(["cost", str(d), "--gpu", "A100-80GB", "--price", "A100-80GB=2.5"]) == 0
    write_quality_report(
        d / "quality.json",
        QualityReport(
            verdict="fail",
            reason="KL divergence fail: +0.0312 nats beyond the noise floor",
            created_at="2026-12-03T00:00:00+00:00",
            baseline=EndpointInfo(url="http://b/v1", model="m"),
            candidate=EndpointInfo(url="http://c/v1", model="m-q4"),
            texts="built-in",
            metrics=[
                {
                    "name": "kl",
                    "label": "KL divergence",
                    "unit": "nats",
                    "status": "fail",
                    "candidate": 0.0312,
                    "floor": 0.0,
                    "excess": 0.0312,
                    "ci95": [0.02, 0.04],
                    "threshold": 0.01,
                    "gated": True,
                },
            ],
        ),
    )
    html = build_report(d, png=False).html.read_text()
    assert 'id="cost"' in html and "$2.50/hour" in html and "output $/Mtok" in html
    assert 'id="quality"' in html and "KL divergence" in html and "m-q4" in html


def test_an_unreadable_extra_is_a_note(sweep_dir: Path, tmp_path: Path) -> None:
    d = tmp_path / "sweep"
    shutil.copytree(sweep_dir, d)
    (d / "quality.json").write_text("{not json")
    html = build_report(d, png=False).html.read_text()
    assert 'id="quality"' not in html
    assert "quality.json" in html and "not valid JSON" in html
