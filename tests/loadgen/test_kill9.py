"""A kill -9'd run opens: ``servetune bench`` and ``servetune sweep`` as real processes against
the simulated engine, killed mid-run; ``report`` and ``diagnose`` then open the directory,
summarise the records that exist and say the run was cut short. A run that fails before its
first request leaves no directory behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.conftest import run_cli

from servetune.metrics.run_finish import open_run
from servetune.results.io import read_records
from servetune.sweep.reading import open_sweep


def _children(pid: int) -> list[int]:
    """Direct children of ``pid`` (the embedded engine the bench started)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


def _wait(cond: Callable[[], bool], timeout: float, proc: subprocess.Popen[str]) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        if proc.poll() is not None:
            err = proc.stderr.read() if proc.stderr else ""
            raise AssertionError(f"the run ended early: {err}")
        time.sleep(0.1)
    raise AssertionError("condition not met in time")


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except OSError:
        return 0


@pytest.fixture
def kill9() -> Iterator[Callable[[list[str]], subprocess.Popen[str]]]:
    """Starts a servetune process; kills it -9 when asked and, after the test, whatever is
    left of it and of the children it started (by their ids)."""
    started: list[subprocess.Popen[str]] = []
    orphans: list[int] = []

    def start(args: list[str]) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "servetune.cli", *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        started.append(proc)
        return proc

    def kill(proc: subprocess.Popen[str]) -> None:
        kids = _children(proc.pid)
        orphans.extend(kids)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        # The embedded engine ends by itself once its parent is gone (it checks twice a
        # second); a generous wait for a loaded box.
        end = time.monotonic() + 30
        while time.monotonic() < end and not all(_gone(k) for k in kids):
            time.sleep(0.2)
        assert all(_gone(k) for k in kids), "a child outlived the kill -9 of its parent"

    start.kill = kill  # type: ignore[attr-defined]
    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    for kid in orphans:
        if not _gone(kid):
            os.kill(kid, signal.SIGKILL)


def test_killed_bench_is_reported_and_diagnosed_as_cut_short(
    kill9: Callable[[list[str]], subprocess.Popen[str]], tmp_path: Path
) -> None:
    out = tmp_path / "run"
    proc = kill9(
        [
            "bench",
            "--num-prompts",
            "600",
            "--request-rate",
            "20",
            "--random-input-len",
            "64",
            "--random-output-len",
            "16",
            "--no-progress",
            "--result-dir",
            str(out),
        ]
    )
    _wait(lambda: _lines(out / "requests.jsonl") >= 40, 120, proc)
    running = json.loads((out / "run.json").read_text())
    assert running["status"] == "running" and running["pid"] == proc.pid
    kill9.kill(proc)  # type: ignore[attr-defined]
    assert proc.returncode == -signal.SIGKILL

    run = open_run(out)
    assert run.status == "cut_short"
    recorded = read_records(out)
    assert len(recorded) >= 40
    assert run.summary.completed + run.summary.failed + run.summary.excluded >= 40
    assert run.summary.ttft.count >= 30 and run.summary.request_throughput > 0
    assert "cut short" in run.warnings[0]

    rep = run_cli("report", str(out), "--no-png", timeout=180)
    assert rep.returncode == 0, rep.stderr
    html = (out / "report.html").read_text()
    assert "CUT SHORT" in html and "cut short" in html

    dx = run_cli("diagnose", str(out), timeout=180)
    assert dx.returncode == 0, dx.stderr
    assert "Traceback" not in dx.stderr
    assert "cut short" in dx.stdout
    dx = run_cli("diagnose", str(out), "--json", timeout=180)
    data = json.loads(dx.stdout)
    assert data["headline"].startswith("(cut short)")
    assert any("cut short" in n for n in data["notes"])


def test_killed_sweep_is_reported_and_diagnosed_as_cut_short(
    kill9: Callable[[list[str]], subprocess.Popen[str]], tmp_path: Path
) -> None:
    out = tmp_path / "sweep"
    proc = kill9(
        [
            "sweep",
            "--request-rates",
            "20,40",
            "--num-prompts",
            "240",
            "--random-input-len",
            "64",
            "--random-output-len",
            "16",
            "--no-progress",
            "--no-report",
            "--result-dir",
            str(out),
        ]
    )
    second = out / "levels" / "rate-40" / "requests.jsonl"
    _wait(lambda: _lines(second) >= 30, 180, proc)
    kill9.kill(proc)  # type: ignore[attr-defined]

    sweep = open_sweep(out)
    assert sweep.status == "cut_short"
    rows = {r.label: r for r in sweep.rows}
    assert rows["rate-20"].status == "complete"
    assert rows["rate-40"].status == "cut_short" and rows["rate-40"].completed >= 20
    assert "cut short" in sweep.warnings[0]
    # the partial level is shown, never used for the knee
    assert sweep.knee is not None and "rate-40" in " ".join(sweep.knee.evidence)

    rep = run_cli("report", str(out), "--no-png", timeout=180)
    assert rep.returncode == 0, rep.stderr
    assert "cut short" in (out / "report.html").read_text()
    dx = run_cli("diagnose", str(out), "--json", timeout=180)
    assert dx.returncode == 0, dx.stderr
    data = json.loads(dx.stdout)
    assert data["headline"].startswith("(cut short)")
    assert any("cut short" in n for n in data["notes"])


def test_a_run_that_never_starts_leaves_no_directory(tmp_path: Path) -> None:
    out = tmp_path / "results" / "run"
    p = run_cli("bench", "--base-url", "http://127.0.0.1:9/v1", "--result-dir", str(out))
    assert p.returncode == 2 and "cannot reach" in p.stderr
    assert not (tmp_path / "results").exists()  # nor the parent it would have created
    sweep = tmp_path / "sweeps" / "s1"
    p = run_cli(
        "sweep",
        "--base-url",
        "http://127.0.0.1:9/v1",
        "--request-rates",
        "1,2",
        "--no-report",
        "--result-dir",
        str(sweep),
    )
    assert p.returncode == 2 and "cannot reach" in p.stderr, p.stderr
    assert not (tmp_path / "sweeps").exists()
