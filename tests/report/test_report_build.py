"""servetune report: files written, the CSV table, a self-contained HTML, bad input."""

from __future__ import annotations

import csv
import re
import shutil
from pathlib import Path

import matplotlib.image as mpimg
import pytest

from servetune.cli import main
from servetune.diagnose import Action, Diagnosis, LevelDiagnosis
from servetune.diagnose import Finding as DxFinding
from servetune.errors import ResultError
from servetune.report import build as build_mod
from servetune.report.build import build_report
from servetune.report.csv_export import COLUMNS
from servetune.report.findings import view_of
from servetune.results.sweep_schema import read_sweep_result, write_sweep_result

EXTERNAL = re.compile(
    r"""(src|href)\s*=\s*["']?\s*(https?:)?//|@import|url\(\s*["']?https?:""", re.I
)


@pytest.fixture
def no_findings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build_mod, "diagnose_view", lambda _p: None)


def test_sweep_report_writes_html_pngs_and_csv(
    sweep_dir: Path, tmp_path: Path, no_findings: None
) -> None:
    out = tmp_path / "out"
    written = build_report(sweep_dir, out)
    names = sorted(p.name for p in written.pngs)
    assert names == ["cdf.png", "latency.png", "send_lag.png", "server.png", "throughput.png"]
    for p in written.pngs:
        img = mpimg.imread(p)
        assert img.shape[1] >= 700 and img.shape[0] >= 300
    html = written.html.read_text()
    sweep = read_sweep_result(sweep_dir)
    assert sweep.knee is not None and sweep.knee.status == "found"
    # The verdict sentence is at the top, before any plot.
    assert html.index(sweep.knee.verdict.split(":")[0]) < html.index("<svg")
    assert html.count("<svg") == 5 and html.count('class="plot"') == 5
    assert "<script" not in html
    assert not EXTERNAL.search(html), EXTERNAL.search(html)
    assert 'id="diagnose"' not in html and "Diagnosis" not in html
    assert sweep.slo_max is not None and "Highest load meeting the SLOs" in html
    # Figure ids are made unique per figure, so clip paths cannot cross between plots.
    ids = re.findall(r'\bid="([^"]+)"', html)
    assert len(ids) == len(set(ids))


def test_csv_has_one_row_per_level(sweep_dir: Path, tmp_path: Path, no_findings: None) -> None:
    written = build_report(sweep_dir, tmp_path, png=False)
    with written.csv.open() as fh:
        rows = list(csv.DictReader(fh))
    sweep = read_sweep_result(sweep_dir)
    assert [r["label"] for r in rows] == [r.label for r in sweep.measured_rows()]
    assert list(rows[0]) == list(COLUMNS)
    first = sweep.measured_rows()[0]
    assert float(rows[0]["request_throughput"]) == pytest.approx(first.request_throughput, 1e-4)
    assert float(rows[0]["ttft_p99_ms"]) == pytest.approx(first.ttft_p99, 1e-4)
    assert rows[0]["kv_cache_usage_mean"] != ""


def test_run_report(sweep_dir: Path, tmp_path: Path, no_findings: None) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(sweep_dir / "levels" / "rate-8", run_dir)
    written = build_report(run_dir)
    assert written.html == run_dir / "report.html"
    assert sorted(p.name for p in written.pngs) == [
        "cdf.png",
        "send_lag.png",
        "server.png",
        "timeline.png",
    ]
    html = written.html.read_text()
    assert "One run at 8 req/s offered" in html
    assert "A knee needs several load levels" in html
    with written.csv.open() as fh:
        assert len(list(csv.DictReader(fh))) == 1


def test_run_without_server_metrics(sweep_dir: Path, tmp_path: Path, no_findings: None) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(sweep_dir / "levels" / "rate-4", run_dir)
    (run_dir / "server_metrics.jsonl").unlink()
    written = build_report(run_dir)
    assert "server.png" not in {p.name for p in written.pngs}
    assert "KV cache averaged" not in written.html.read_text()


def test_diagnose_findings_fill_their_slot(
    sweep_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    diagnosis = Diagnosis(
        kind="sweep",
        headline="Past the knee from rate-16: the queue grows without bound",
        findings=[
            DxFinding(
                rule="past_knee",
                kind="bottleneck",
                title="Past the knee: waiting grows without bound",
                level="rate-32",
                evidence=["waiting 84 at rate-32"],
                actions=[
                    Action(
                        id="rate_limit",
                        title="rate-limit at 7 req/s",
                        expected="P99 TTFT < 1 s",
                        risk="lower throughput",
                    )
                ],
            ),
            DxFinding(
                rule="gpu_idle", kind="cannot_tell", title="GPU idle?", missing=["gpu_utilization"]
            ),
        ],
        levels=[LevelDiagnosis(label="rate-32", headline="saturated")],
    )
    monkeypatch.setattr(build_mod, "diagnose_view", lambda _p: view_of(diagnosis))
    html = build_report(sweep_dir, tmp_path, png=False).html.read_text()
    assert 'id="diagnose"' in html
    assert "the queue grows without bound" in html and "waiting 84 at rate-32" in html
    assert "rate-limit at 7 req/s — P99 TTFT &lt; 1 s (risk: lower throughput)" in html
    assert "Could not evaluate: GPU idle? (gpu_utilization)" in html


def test_failing_diagnose_is_a_note_not_a_crash(
    sweep_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import servetune.report.findings as findings_mod

    def unreadable(_path: object) -> Diagnosis:
        raise ResultError("levels/rate-4/server_metrics.jsonl:3: not valid JSON")

    monkeypatch.setattr(findings_mod, "diagnose_path", unreadable)
    html = build_report(sweep_dir, tmp_path, png=False).html.read_text()
    assert 'id="diagnose"' not in html
    assert "diagnose could not read" in html and "server_metrics.jsonl:3: not valid JSON" in html


def test_a_bug_in_diagnose_is_not_hidden(
    sweep_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import servetune.report.findings as findings_mod

    def broken(_path: object) -> Diagnosis:
        raise RuntimeError("rule table corrupt")

    monkeypatch.setattr(findings_mod, "diagnose_path", broken)
    with pytest.raises(RuntimeError, match="rule table corrupt"):
        build_report(sweep_dir, tmp_path, png=False)


def test_real_diagnose(sweep_dir: Path, tmp_path: Path) -> None:
    html = build_report(sweep_dir, tmp_path, png=False).html.read_text()
    assert 'id="diagnose"' in html
    assert "diagnose could not read" not in html


def test_missing_level_dir_is_noted_not_fatal(
    sweep_dir: Path, tmp_path: Path, no_findings: None
) -> None:
    copy = tmp_path / "sweep"
    shutil.copytree(sweep_dir, copy)
    shutil.rmtree(copy / "levels" / "rate-4")
    html = build_report(copy, png=False).html.read_text()
    assert "rate-4" in html and "has no run.json" in html


def test_directory_without_results_says_what_it_expected(tmp_path: Path) -> None:
    with pytest.raises(ResultError) as err:
        build_report(tmp_path)
    assert "expected run.json (a run) or sweep.json (a sweep)" in err.value.message


def test_report_cli_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "holds no servetune result" in err and "hint:" in err
    assert main(["report", str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "sweep.json").write_text('{"kind": "run"}')
    assert main(["report", str(tmp_path)]) == 2
    assert "not a servetune sweep file" in capsys.readouterr().err


def test_sweep_without_finished_levels(sweep_dir: Path, tmp_path: Path) -> None:
    sweep = read_sweep_result(sweep_dir)
    sweep.rows = []
    write_sweep_result(tmp_path, sweep)
    with pytest.raises(ResultError) as err:
        build_report(tmp_path)
    assert "no finished level yet" in err.value.message


def test_report_cli_prints_paths(
    sweep_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], no_findings: None
) -> None:
    assert main(["report", str(sweep_dir), "--out", str(tmp_path), "--no-png"]) == 0
    out = capsys.readouterr().out
    assert "The knee is at" in out
    assert f"report: {tmp_path / 'report.html'}" in out
    assert not list(tmp_path.glob("*.png"))


def test_stale_knee_is_recomputed_and_said(
    sweep_dir: Path, tmp_path: Path, no_findings: None
) -> None:
    sweep = read_sweep_result(sweep_dir)
    assert sweep.knee is not None
    sweep.knee.verdict = "The knee is at ≈1 req/s (an older servetune's answer)."
    copy = tmp_path / "sweep"
    shutil.copytree(sweep_dir, copy)
    write_sweep_result(copy, sweep)
    html = build_report(copy, png=False).html.read_text()
    assert "recomputed from the levels" in html and "an older servetune" in html
    fresh = read_sweep_result(sweep_dir).knee
    assert fresh is not None and fresh.verdict.split(":")[0] in html


def test_a_sessions_run_draws_ttft_by_turn_and_cached_share(
    tmp_path: Path, no_findings: None
) -> None:
    from servetune.results.conversation import MultiturnConfig
    from servetune.results.schema import BenchConfig
    from servetune.sim.config import EngineConfig
    from servetune.sim.offline import run_offline

    cfg = BenchConfig(
        dataset_name="multiturn",
        multiturn=MultiturnConfig(turns_min=2, turns_max=5, system_prompt_len=256),
        random_input_len=64,
        random_output_len=32,
        num_prompts=20,
        request_rate=4.0,
        seed=5,
    )
    run_offline(cfg, EngineConfig(max_model_len=4096), tmp_path / "run")
    written = build_report(tmp_path / "run")
    assert "cache.png" in {p.name for p in written.pngs}
    html = written.html.read_text()
    assert "TTFT by turn" in html and "TTFT against cached share" in html
    # a run without reuse (random prompts) has neither
    plain = BenchConfig(random_input_len=64, random_output_len=8, num_prompts=10, seed=5)
    run_offline(plain, EngineConfig(max_model_len=4096), tmp_path / "plain")
    assert "cache.png" not in {p.name for p in build_report(tmp_path / "plain").pngs}
