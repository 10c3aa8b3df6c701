"""The sweep runner in-process: one run dir per level, sweep.json after each level, resume,
interruptions, auto levels, the SLO confirmation level, server control."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from servetune.errors import ConfigError, TargetError
from servetune.results.io import RUN_FILE, read_run_result, write_run_result
from servetune.results.schema import BenchConfig, RunResult, Slo
from servetune.results.sweep_schema import SweepConfig, read_sweep_result
from servetune.sweep.runner import run_sweep
from servetune.sweep.synthetic import SyntheticEngine
from servetune.workload.seeds import derive_seed

RATES = [2.0, 4.0, 8.0, 16.0, 32.0]
LABELS = ["rate-2", "rate-4", "rate-8", "rate-16", "rate-32"]


class Recorder:
    """A level runner that records what it ran and can misbehave on cue."""

    def __init__(
        self,
        *,
        fail_at: str | None = None,
        interrupt_at: str | None = None,
        ctrl_c_at: str | None = None,
        sweep_dir: Path | None = None,
    ) -> None:
        self.engine = SyntheticEngine()
        self.ran: list[str] = []
        self.rows_seen: list[int] = []
        self.fail_at, self.interrupt_at, self.ctrl_c_at = fail_at, interrupt_at, ctrl_c_at
        self.sweep_dir = sweep_dir

    def __call__(self, cfg: BenchConfig, level_dir: Path) -> RunResult:
        assert cfg.label is not None
        if self.sweep_dir is not None:
            self.rows_seen.append(len(read_sweep_result(self.sweep_dir).rows))
        if cfg.label == self.fail_at:
            raise TargetError("connection refused by 127.0.0.1:9")
        if cfg.label == self.ctrl_c_at:
            raise KeyboardInterrupt
        self.ran.append(cfg.label)
        result = self.engine(cfg, level_dir)
        if cfg.label == self.interrupt_at:
            result.status = "interrupted"
            write_run_result(level_dir, result)
        return result


def config(**kw: object) -> SweepConfig:
    fields: dict[str, object] = {
        "bench": BenchConfig(num_prompts=120),
        "mode": "rate",
        "request_rates": RATES,
    }
    fields.update(kw)
    return SweepConfig.model_validate(fields)


def quiet(_msg: str) -> None:
    pass


def test_levels_in_order_and_sweep_json_after_each(tmp_path: Path) -> None:
    rec = Recorder(sweep_dir=tmp_path)
    result = run_sweep(config(), tmp_path, rec, echo=quiet)
    assert rec.ran == LABELS
    assert rec.rows_seen == [0, 1, 2, 3, 4]  # each level saw the rows of those before it
    assert result.status == "complete"
    assert [r.label for r in result.measured_rows()] == LABELS
    for label in LABELS:
        run = read_run_result(tmp_path / "levels" / label)
        assert run.config.label == label
    on_disk = read_sweep_result(tmp_path)
    assert on_disk.status == "complete" and on_disk.knee is not None
    assert on_disk.knee.status == "found"
    row = on_disk.measured_rows()[-1]
    assert row.server is not None and row.server.waiting_mean and row.server.waiting_mean > 0
    assert row.level_dir == "levels/rate-32" and row.send_lag_p99 is not None


def test_existing_sweep_needs_resume(tmp_path: Path) -> None:
    run_sweep(config(), tmp_path, Recorder(), echo=quiet)
    with pytest.raises(ConfigError) as err:
        run_sweep(config(), tmp_path, Recorder(), echo=quiet)
    assert "give resume to continue it" in (err.value.hint or "")  # the CLI: --resume


def test_resume_refuses_other_settings(tmp_path: Path) -> None:
    run_sweep(config(), tmp_path, Recorder(), echo=quiet)
    other = config(bench=BenchConfig(num_prompts=200), request_rates=[2.0, 4.0])
    with pytest.raises(ConfigError) as err:
        run_sweep(other, tmp_path, Recorder(), resume=True, echo=quiet)
    assert "bench.num_prompts: 120 → 200" in err.value.message
    assert "request_rates" in err.value.message


def test_resume_after_failure_reuses_finished_levels(tmp_path: Path) -> None:
    with pytest.raises(TargetError):
        run_sweep(config(), tmp_path, Recorder(fail_at="rate-8"), echo=quiet)
    partial = read_sweep_result(tmp_path)
    assert partial.status == "failed"
    assert [r.label for r in partial.measured_rows()] == ["rate-2", "rate-4"]
    before = (tmp_path / "levels" / "rate-4" / RUN_FILE).stat().st_mtime_ns
    rec = Recorder()
    result = run_sweep(config(), tmp_path, rec, resume=True, echo=quiet)
    assert rec.ran == ["rate-8", "rate-16", "rate-32"]
    assert result.status == "complete"
    assert [r.label for r in result.measured_rows()] == LABELS
    assert (tmp_path / "levels" / "rate-4" / RUN_FILE).stat().st_mtime_ns == before


def test_partial_level_is_rerun_from_scratch(tmp_path: Path) -> None:
    run_sweep(config(), tmp_path, Recorder(), echo=quiet)
    level = tmp_path / "levels" / "rate-16"
    (level / RUN_FILE).unlink()  # as if killed after requests.jsonl, before run.json
    (level / "stray.tmp").write_text("x")
    rec = Recorder()
    run_sweep(config(), tmp_path, rec, resume=True, echo=quiet)
    assert rec.ran == ["rate-16"]
    assert not (level / "stray.tmp").exists()


def test_a_level_cut_short_is_rerun_with_other_prompts(tmp_path: Path) -> None:
    """A level cut short had sent some of its prompts, which the server's prefix cache may
    still hold (seen: 78% of a resumed level's prompt tokens answered from the cache). Its
    re-run draws other prompts — a seed derived from the level's, recorded — and a later
    resume reuses that finished re-run."""
    cfg = config(bench=BenchConfig(num_prompts=120, seed=11))
    with pytest.raises(KeyboardInterrupt):
        run_sweep(cfg, tmp_path, Recorder(interrupt_at="rate-16"), echo=quiet)
    first = read_run_result(tmp_path / "levels" / "rate-16").config.seed
    assert first == derive_seed(11, "rate-16")
    run_sweep(cfg, tmp_path, Recorder(), resume=True, echo=quiet)
    again = read_run_result(tmp_path / "levels" / "rate-16").config.seed
    assert again != first
    assert read_run_result(tmp_path / "levels" / "rate-32").config.seed == derive_seed(
        11, "rate-32"
    )  # a level run for the first time keeps its own seed
    rec = Recorder()
    run_sweep(cfg, tmp_path, rec, resume=True, echo=quiet)
    assert rec.ran == []  # the re-run is a finished level like any other


def test_ctrl_c_marks_the_sweep_interrupted(tmp_path: Path) -> None:
    with pytest.raises(KeyboardInterrupt):
        run_sweep(config(), tmp_path, Recorder(ctrl_c_at="rate-16"), echo=quiet)
    assert read_sweep_result(tmp_path).status == "interrupted"
    # A level the bench itself reports as interrupted (its own Ctrl-C) stops the sweep too,
    # and is run again on resume.
    with pytest.raises(KeyboardInterrupt):
        run_sweep(config(), tmp_path, Recorder(interrupt_at="rate-16"), resume=True, echo=quiet)
    partial = read_sweep_result(tmp_path)
    assert partial.status == "interrupted"
    assert {r.label: r.status for r in partial.rows}["rate-16"] == "interrupted"
    rec = Recorder()
    run_sweep(config(), tmp_path, rec, resume=True, echo=quiet)
    assert rec.ran == ["rate-16", "rate-32"]


def test_auto_probes_then_places_levels(tmp_path: Path) -> None:
    rec = Recorder()
    cfg = config(request_rates="auto", auto_levels=6)
    result = run_sweep(cfg, tmp_path, rec, echo=quiet)
    assert rec.ran[0] == "probe-inf"
    assert len(rec.ran) == 7
    probe = next(r for r in result.rows if r.role == "probe")
    assert math.isinf(probe.load)
    rates = [p.value for p in result.planned if p.role == "level"]
    assert rates[0] == pytest.approx(0.1 * probe.request_throughput, rel=0.01)
    assert rates[-1] == pytest.approx(1.2 * probe.request_throughput, rel=0.01)
    assert result.knee is not None and result.knee.status == "found"
    again = Recorder()
    run_sweep(cfg, tmp_path, again, resume=True, echo=quiet)
    assert again.ran == []


def test_concurrency_sweep(tmp_path: Path) -> None:
    cfg = config(mode="concurrency", request_rates=None, concurrencies=[1, 4, 16, 32, 64, 128])
    result = run_sweep(cfg, tmp_path, Recorder(), echo=quiet)
    rows = result.measured_rows()
    assert [r.concurrency for r in rows] == [1, 4, 16, 32, 64, 128]
    assert all(
        math.isinf(read_run_result(tmp_path / r.level_dir).config.request_rate) for r in rows
    )
    assert result.knee is not None and result.knee.status == "found"
    assert 16 <= (result.knee.offered or 0) <= 64


def test_confirm_runs_one_more_level_at_the_slo_max(tmp_path: Path) -> None:
    bench = BenchConfig(num_prompts=120, goodput=Slo(ttft=1000))
    cfg = config(bench=bench, request_rates=[2.0, 4.0, 8.0, 12.0, 16.0, 32.0], confirm=True)
    rec = Recorder()
    result = run_sweep(cfg, tmp_path, rec, echo=quiet)
    sm = result.slo_max
    assert sm is not None and sm.confirm_label is not None
    assert rec.ran[-1] == sm.confirm_label and sm.confirm_label.startswith("confirm-rate-")
    assert sm.confirmed is not None
    assert any(("confirmed" in e) for e in sm.evidence)
    confirm_row = next(r for r in result.rows if r.role == "confirm")
    assert 8.0 < confirm_row.load < 16.0


class FakeServer:
    def __init__(self) -> None:
        self.events: list[str] = []

    def start(self, log_path: Path) -> None:
        self.events.append(f"start:{log_path.parent.name}")

    def stop(self) -> None:
        self.events.append("stop")


def test_server_started_once_or_per_level(tmp_path: Path) -> None:
    once = FakeServer()
    run_sweep(config(request_rates=[2.0, 4.0]), tmp_path / "a", Recorder(), server=once, echo=quiet)
    assert once.events == ["start:a", "stop"]
    each = FakeServer()
    run_sweep(
        config(request_rates=[2.0, 4.0], restart_per_level=True),
        tmp_path / "b",
        Recorder(),
        server=each,
        echo=quiet,
    )
    assert each.events == ["start:rate-2", "stop", "start:rate-4", "stop"]
    failing = FakeServer()
    with pytest.raises(TargetError):
        run_sweep(config(), tmp_path / "c", Recorder(fail_at="rate-4"), server=failing, echo=quiet)
    assert failing.events == ["start:c", "stop"]


def test_repeats_run_each_level_with_other_seeds(tmp_path: Path) -> None:
    rec = Recorder()
    result = run_sweep(
        config(request_rates=[2.0, 8.0, 16.0, 32.0], repeats=2), tmp_path, rec, echo=quiet
    )
    assert rec.ran == [
        "rate-2",
        "rate-2-r2",
        "rate-8",
        "rate-8-r2",
        "rate-16",
        "rate-16-r2",
        "rate-32",
        "rate-32-r2",
    ]
    labels = [x for x in rec.ran]
    seeds = [read_run_result(tmp_path / "levels" / x).config.seed for x in labels]
    assert len(set(seeds)) == len(seeds)  # every level and repeat: prompts of its own
    assert seeds[labels.index("rate-8-r2")] == derive_seed(0, "rate-8-r2")
    knee = result.knee
    assert knee is not None and knee.status == "found"
    assert any("run-to-run spread" in r for r in knee.confidence_reasons)
