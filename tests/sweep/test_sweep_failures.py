"""A sweep whose levels fail: each level has a status, failing levels stay out of the knee and
cap the SLO-max, the sweep ends degraded or failed with a non-zero exit, and diagnose names the
failures instead of giving capacity advice."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.conftest import run_cli

from servetune.diagnose import diagnose_path
from servetune.metrics.run_finish import finish
from servetune.results.io import LineAppender, read_records, record_line, write_run_result
from servetune.results.schema import BenchConfig, RunResult, Slo
from servetune.results.sweep_schema import SweepConfig, read_sweep_result
from servetune.sweep.runner import run_sweep
from servetune.sweep.synthetic import SyntheticEngine

Factory = Callable[..., Any]
RATES = [2.0, 4.0, 8.0, 16.0, 32.0]


class FailsFrom:
    """A synthetic server that fails ``share`` of its requests (HTTP 500) from ``rate`` up —
    the successes it still serves are fast, as a server that sheds load would make them."""

    def __init__(self, rate: float, share: float) -> None:
        self.rate, self.share = rate, share
        self.engine = SyntheticEngine()

    def __call__(self, cfg: BenchConfig, level_dir: Path) -> RunResult:
        result = self.engine(cfg, level_dir)
        if cfg.request_rate < self.rate:
            return result
        records = read_records(level_dir)
        every = round(1 / self.share)
        for i, r in enumerate(records):
            if i % every == 0 or self.share >= 1:
                r.status, r.error, r.http_status = "failed", "HTTP 500: overloaded", 500
                r.error_class = "server_error"
                r.first_ns = r.last_ns = None
                r.chunk_ns = []
            else:  # what is left goes through quickly
                r.last_ns = r.first_ns = r.send_ns + 1_000_000
                r.chunk_ns = [r.first_ns]
        (level_dir / "requests.jsonl").unlink()
        app = LineAppender(level_dir / "requests.jsonl")
        app.write(b"".join(record_line(r) for r in records))
        app.close()
        out = finish(result, records, interrupted=False, workers=1)
        write_run_result(level_dir, out)
        return out


def config(**kw: Any) -> SweepConfig:
    fields: dict[str, Any] = {
        "bench": BenchConfig(num_prompts=120),
        "mode": "rate",
        "request_rates": RATES,
    }
    fields.update(kw)
    return SweepConfig.model_validate(fields)


def quiet(_msg: str) -> None:
    pass


def test_failing_levels_stay_out_of_the_knee_and_cap_the_slo_max(tmp_path: Path) -> None:
    cfg = config(bench=BenchConfig(num_prompts=120, goodput=Slo(ttft=60_000)))
    result = run_sweep(cfg, tmp_path, FailsFrom(16.0, 0.5), echo=quiet)
    status = {r.label: r.status for r in result.rows}
    assert status == {
        "rate-2": "complete",
        "rate-4": "complete",
        "rate-8": "complete",
        "rate-16": "failed",
        "rate-32": "failed",
    }
    assert result.status == "degraded"
    row = next(r for r in result.rows if r.label == "rate-32")
    assert row.error_classes == {"server_error": 60} and row.failure_share == 0.5
    knee = result.knee
    assert knee is not None
    assert not knee.bracket or not set(knee.bracket) & {"rate-16", "rate-32"}
    assert "left out (not complete): rate-16, rate-32" in " ".join(knee.evidence)
    # every level that served met the SLO; the server failing at 16 req/s caps the SLO-max
    sm = result.slo_max
    assert sm is not None and sm.status == "found" and sm.offered == 8.0, sm
    assert "failed 50% of requests" in sm.verdict
    assert any("left out of the knee" in w for w in result.warnings)
    on_disk = read_sweep_result(tmp_path)
    assert on_disk.status == "degraded"

    diag = diagnose_path(tmp_path)
    top = diag.findings[0]
    assert top.rule == "failures" and "rate-16, rate-32" in top.title
    levels = {lv.label: lv for lv in diag.levels}
    assert levels["rate-32"].findings[0].rule == "failures"
    # a failing level gets no capacity advice
    assert not any(a.cost_step for f in levels["rate-32"].findings for a in f.actions)


def test_every_level_failing_is_a_failed_sweep_without_knee(tmp_path: Path) -> None:
    result = run_sweep(config(), tmp_path, FailsFrom(0.0, 1.0), echo=quiet)
    assert result.status == "failed"
    assert len(result.rows) == 2  # stopped after two levels where nothing succeeded
    assert result.knee is not None and result.knee.verdict.startswith("No knee: no level")
    diag = diagnose_path(tmp_path)
    assert diag.findings[0].rule == "failures"
    assert "no capacity advice" in diag.headline
    assert all(f.rule != "capacity_limit" for f in diag.findings)
    assert not any(a.cost_step for f in diag.findings for a in f.actions)


def test_cli_sweep_against_a_server_answering_500(scripted: Factory, tmp_path: Path) -> None:
    srv = scripted({"fail_every": 1, "fail_status": 500})
    out = tmp_path / "sweep"
    p = run_cli(
        "sweep",
        "--base-url",
        srv.base_url,
        "--request-rates",
        "10,20,40",
        "--num-prompts",
        "20",
        "--random-input-len",
        "16",
        "--random-output-len",
        "4",
        "--no-progress",
        "--no-metrics",
        "--result-dir",
        str(out),
        timeout=300,
    )
    assert p.returncode == 1, p.stdout + p.stderr
    assert "Traceback" not in p.stderr
    assert "sweep failed" in p.stdout and "stopping" in p.stderr
    data = json.loads((out / "sweep.json").read_text())
    assert data["status"] == "failed"
    assert [r["status"] for r in data["rows"]] == ["failed", "failed"]
    assert data["rows"][0]["error_classes"] == {"server_error": 20}
    dx = run_cli("diagnose", str(out), "--json", timeout=120)
    assert dx.returncode == 0, dx.stderr
    diag = json.loads(dx.stdout)
    assert diag["findings"][0]["rule"] == "failures"
    assert "server_error" in diag["headline"]
    advice = [a for f in diag["findings"] for a in f["actions"] if a.get("cost_step")]
    assert advice == [], advice
    assert "GPU" not in diag["headline"]


def test_diagnose_of_an_all_500_run_names_the_failures(scripted: Factory, tmp_path: Path) -> None:
    srv = scripted({"fail_every": 1, "fail_status": 503})
    p = run_cli(
        "bench",
        "--base-url",
        srv.base_url,
        "--num-prompts",
        "20",
        "--request-rate",
        "50",
        "--random-input-len",
        "16",
        "--random-output-len",
        "4",
        "--no-progress",
        "--result-dir",
        str(tmp_path),
    )
    assert p.returncode == 1, p.stderr
    diag = diagnose_path(tmp_path)
    assert diag.findings[0].rule == "failures" and not diag.healthy
    assert "100% of the requests" in diag.headline and "server_error" in diag.headline
    assert all(f.kind == "warning" for f in diag.findings)
    assert not any(a.cost_step for f in diag.findings for a in f.actions)
    html = run_cli("report", str(tmp_path), "--no-png")
    assert html.returncode == 0, html.stderr
    page = (tmp_path / "report.html").read_text()
    assert "This run FAILED" in page and "server_error" in page
