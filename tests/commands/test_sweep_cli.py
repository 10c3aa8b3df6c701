"""servetune sweep from the command line: a real kill and --resume, --server-cmd with a real
server process, sweeps that never saturate or saturate at once, and bad input."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from servetune.cli import main
from servetune.results.io import RUN_FILE, read_run_result
from servetune.results.sweep_schema import read_sweep_result
from servetune.workload.seeds import attempt_seed, derive_seed

HERE = Path(__file__).resolve().parent
"""Where ``sweep_fake`` (the level runners named by ``--level-runner``) lives."""
PID_SERVER = HERE.parent / "sweep" / "pid_server.py"
RATES = "2,4,8,16,32"
LABELS = ["rate-2", "rate-4", "rate-8", "rate-16", "rate-32"]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    return env


def _sweep_cmd(out: Path, runner: str, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "servetune.cli",
        "sweep",
        "--level-runner",
        runner,
        "--request-rates",
        RATES,
        "--num-prompts",
        "80",
        "--result-dir",
        str(out),
        "--no-report",
        *extra,
    ]


def _wait_for(path: Path, proc: subprocess.Popen[bytes], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"the sweep ended before {path} appeared")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"{path} did not appear within {timeout} s")
        time.sleep(0.01)


def test_killed_sweep_resumes_to_the_same_levels(tmp_path: Path) -> None:
    out = tmp_path / "killed"
    proc = subprocess.Popen(
        _sweep_cmd(out, "sweep_fake:slow_level"),
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # Kill -9 in the middle of the third level: its requests are on disk, its run.json
        # is not (the slow runner sleeps in between).
        _wait_for(out / "levels" / "rate-8" / "requests.jsonl", proc)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(30)
    assert proc.returncode == -signal.SIGKILL
    partial = read_sweep_result(out)
    assert partial.status == "running"  # nobody got to say otherwise
    assert [r.label for r in partial.measured_rows()] == ["rate-2", "rate-4"]
    assert not (out / "levels" / "rate-8" / RUN_FILE).exists()
    kept = (out / "levels" / "rate-4" / RUN_FILE).stat().st_mtime_ns

    done = subprocess.run(
        _sweep_cmd(out, "sweep_fake:slow_level", "--resume"),
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "rate-4" in done.stderr and "reused" in done.stderr
    resumed = read_sweep_result(out)
    assert resumed.status == "complete"
    assert [r.label for r in resumed.measured_rows()] == LABELS
    assert (out / "levels" / "rate-4" / RUN_FILE).stat().st_mtime_ns == kept

    # The resumed sweep kept the seed it drew at its start; the same sweep with that seed,
    # never interrupted, gives the same levels — but the one that was cut: it had sent some of
    # its prompts (a server's prefix cache may hold them), so its re-run drew others, with a
    # seed derived from the level's and recorded.
    seed = str(partial.config.bench.seed)
    assert resumed.config.bench.seed == partial.config.bench.seed
    level_seed = derive_seed(partial.config.bench.seed, "rate-8")
    redone = read_run_result(out / "levels" / "rate-8").config.seed
    assert redone == attempt_seed(level_seed, 1) != level_seed
    ref = tmp_path / "ref"
    assert main(_sweep_cmd(ref, "sweep_fake:fast_level", "--seed", seed)[3:]) == 0
    reference = read_sweep_result(ref)
    assert read_run_result(ref / "levels" / "rate-8").config.seed == level_seed
    for a, b in zip(resumed.measured_rows(), reference.measured_rows(), strict=True):
        assert a.label == b.label
        if a.label == "rate-8":
            continue
        assert (a.completed, a.request_throughput, a.ttft_p99, a.e2el_p99) == (
            b.completed,
            b.request_throughput,
            b.ttft_p99,
            b.e2el_p99,
        )
    assert resumed.knee is not None and reference.knee is not None
    assert resumed.knee.status == reference.knee.status == "found"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _alive(pid: int, timeout: float = 10.0) -> bool:
    """Whether pid still runs (a zombie awaiting its reaper does not count)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return False
        if state in ("Z", "X"):
            return False
        time.sleep(0.05)
    return True


@pytest.mark.parametrize("restart", [False, True])
def test_server_cmd_starts_and_stops_the_server(
    tmp_path: Path, restart: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    port = _free_port()
    server_cmd = f"{sys.executable} {PID_SERVER} {port}"
    args = [
        "sweep",
        "--level-runner",
        "sweep_fake:pid_level",
        "--request-rates",
        "2,4,8",
        "--num-prompts",
        "60",
        "--base-url",
        f"http://127.0.0.1:{port}/v1",
        "--server-cmd",
        server_cmd,
        "--result-dir",
        str(tmp_path),
        "--no-report",
        "--server-ready-timeout",
        "60",
    ]
    if restart:
        args.append("--restart-per-level")
    assert main(args) == 0
    pids = [int((tmp_path / "levels" / f"rate-{r}" / "server_pid").read_text()) for r in (2, 4, 8)]
    assert len(set(pids)) == (3 if restart else 1)
    for pid in set(pids):
        assert not _alive(pid), "the server must be stopped when the sweep ends"
    logs = list(tmp_path.rglob("server.log"))
    assert len(logs) == (3 if restart else 1)
    assert all("pid_server" in p.read_text() for p in logs)


def test_server_cmd_that_dies_is_reported_with_its_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = _free_port()
    code = main(
        [
            "sweep",
            "--level-runner",
            "sweep_fake:pid_level",
            "--request-rates",
            "2,4",
            "--num-prompts",
            "20",
            "--base-url",
            f"http://127.0.0.1:{port}/v1",
            "--server-cmd",
            f"{sys.executable} -c \"print('CUDA out of memory'); raise SystemExit(3)\"",
            "--result-dir",
            str(tmp_path),
            "--no-report",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "exited with status 3" in err and "CUDA out of memory" in err
    assert read_sweep_result(tmp_path).status == "failed"


def test_never_saturating_sweep_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "sweep",
            "--level-runner",
            "sweep_fake:fast_level",
            "--request-rates",
            "0.25,0.5,1,2",
            "--num-prompts",
            "60",
            "--result-dir",
            str(tmp_path),
            "--no-report",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "never saturated" in out and "sweep higher rates, e.g. 3,4,6,8" in out
    assert read_sweep_result(tmp_path).knee.status == "above_range"  # type: ignore[union-attr]


def test_sweep_saturated_at_the_first_level_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "sweep",
            "--level-runner",
            "sweep_fake:fast_level",
            "--request-rates",
            "40,80,160",
            "--num-prompts",
            "150",
            # The synthetic engine's noise follows the seed; with this one the levels' P99s
            # keep the order the curve check reads (another can give "no clear knee").
            "--seed",
            "2",
            "--result-dir",
            str(tmp_path),
            "--no-report",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "already saturated at the lowest level" in out and "sweep lower rates" in out
    knee = read_sweep_result(tmp_path).knee
    assert knee is not None and knee.status == "below_range"
    assert max(knee.suggested_loads) < 40


def test_sweep_writes_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "sweep",
            "--level-runner",
            "sweep_fake:fast_level",
            "--request-rates",
            "2,8,12,16",
            "--num-prompts",
            "100",
            "--result-dir",
            str(tmp_path),
            "--goodput",
            "ttft:500",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "knee: The knee is at" in out and "SLO: " in out
    assert f"report: {tmp_path / 'report.html'}" in out
    assert (tmp_path / "levels.csv").exists() and (tmp_path / "latency.png").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--resume"], "--resume needs --result-dir"),
        (["--confirm"], "needs SLOs"),
        (["--server-cmd", "true"], "--server-cmd needs --base-url"),
        (["--request-rates", "8,fast"], "'fast' is not a number"),
        (["--concurrencies", "0,2"], "every value must be ≥ 1"),
        (["--knee-k", "0"], "--knee-k must be > 0"),
        (["--sim-offline", "--base-url", "http://127.0.0.1:9/v1"], "--base-url does not apply"),
    ],
)
def test_bad_input(
    argv: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)  # a default --result-dir must not land in the checkout
    assert main(["sweep", "--level-runner", "sweep_fake:fast_level", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err
    assert not list(tmp_path.iterdir())


def test_existing_sweep_without_resume(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "sweep",
        "--level-runner",
        "sweep_fake:fast_level",
        "--request-rates",
        "2,4",
        "--num-prompts",
        "20",
        "--result-dir",
        str(tmp_path),
        "--no-report",
    ]
    assert main(args) == 0
    assert main(args) == 2
    assert "already holds a sweep" in capsys.readouterr().err


def test_a_runs_folder_is_not_turned_into_a_sweep(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`sweep --result-dir RUN_DIR` wrote sweep.json beside the run's run.json and exited 0:
    every reader then saw a sweep and the run was hidden."""
    run = tmp_path / "run"
    assert (
        main(["sim", "run", "--num-prompts", "5", "--no-progress", "--result-dir", str(run)]) == 0
    )
    before = sorted(p.name for p in run.iterdir())
    capsys.readouterr()
    args = ["sweep", "--level-runner", "sweep_fake:fast_level", "--request-rates", "2,4"]
    assert main([*args, "--num-prompts", "20", "--result-dir", str(run), "--no-report"]) == 2
    assert "holds a run (run.json)" in capsys.readouterr().err
    assert sorted(p.name for p in run.iterdir()) == before
