"""Several workers on one study in a real PostgreSQL (the Debian package, started here on a
free loopback port): no trial runs twice, and a worker killed with -9 mid-trial leaves no
engine behind and its trial is failed and re-queued by the next worker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
from tests.tune.postgres import postgres_server

from servetune.engines.process import group_members
from servetune.metrics.slo_spec import parse_slos
from servetune.results.schema import BenchConfig
from servetune.results.tune_file import TrialRecord, TuneSpec
from servetune.tune.space import build_space
from servetune.tune.storage import grace_for, open_storage, storage_url
from servetune.tune.study import create_study

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def pg() -> Iterator[str]:
    with postgres_server() as url:
        yield url


def _spec(realtime: bool, trials: int) -> TuneSpec:
    small = realtime
    workload = BenchConfig(
        num_prompts=40 if small else 200,
        random_input_len=128 if small else 1024,
        random_output_len=16 if small else 128,
        seed=5,
    )
    return TuneSpec(
        engine="sim",
        model="Qwen/Qwen2.5-7B-Instruct",
        gpu="A100-80GB",
        workload=workload,
        slos=parse_slos(["ttft:p99<=1000", "tpot:p99<=50"]),
        space=build_space(
            "sim",
            ["max_num_seqs=8,16,32,64,128,256,512,1024", "max_num_batched_tokens=2048,4096,8192"],
        ),
        trials=trials,
        repeats=1,
        probes=4 if small else 7,
        realtime=realtime,
        heartbeat_s=2,
    )


def _study(url: str, name: str, spec: TuneSpec) -> optuna.Study:
    storage = open_storage(storage_url(Path("."), url), spec.heartbeat_s)
    study, _ = create_study(spec, name, storage, resume=False)
    return study


def _worker(url: str, name: str, out: Path, trials: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "servetune.cli",
            "tune",
            "worker",
            "--study",
            name,
            "--storage",
            url,
            "--result-dir",
            str(out),
            "--trials",
            str(trials),
            "--heartbeat",
            "2",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def _records(path: Path) -> list[TrialRecord]:
    if not path.exists():
        return []
    return [TrialRecord.model_validate_json(line) for line in path.read_text().splitlines()]


def test_two_workers_share_one_study_and_no_trial_runs_twice(pg: str, tmp_path: Path) -> None:
    spec = _spec(realtime=False, trials=10)
    _study(pg, "shared", spec)
    workers = [_worker(pg, "shared", tmp_path / f"w{i}", 10) for i in range(2)]
    for w in workers:
        out, _ = w.communicate(timeout=500)
        assert w.returncode == 0, out.decode()
    mine = [_records(tmp_path / f"w{i}" / "trials.jsonl") for i in range(2)]
    numbers = [r.number for recs in mine for r in recs]
    assert len(numbers) == len(set(numbers)), "a trial ran on both workers"
    assert all(mine), "each worker ran trials"
    assert {r.worker for r in mine[0]}.isdisjoint({r.worker for r in mine[1]})
    study = optuna.load_study(study_name="shared", storage=storage_url(Path("."), pg))
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert sorted(t.number for t in done) == sorted(numbers)
    launched = [t for t in done if t.user_attrs.get("status") in ("ok", "no-rate", "failed")]
    assert len(launched) >= 10


def _engine_child(worker_pid: int, deadline: float) -> int | None:
    """The pid of a simulated engine the worker started (its own process group)."""
    while time.monotonic() < deadline:
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            ppid = int(stat[stat.rfind(")") + 2 :].split()[1])
            if ppid == worker_pid and b"sim serve" in cmd:
                return int(entry)
        time.sleep(0.2)
    return None


def test_a_killed_worker_leaves_no_engine_and_its_trial_is_requeued(
    pg: str, tmp_path: Path
) -> None:
    spec = _spec(realtime=True, trials=2)
    study = _study(pg, "killed", spec)
    a = _worker(pg, "killed", tmp_path / "a", 2)
    engine = _engine_child(a.pid, time.monotonic() + 120)
    assert engine is not None, "the worker never started an engine"
    time.sleep(1.5)  # the trial is under way (engine starting or being loaded)
    os.kill(a.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    a.wait(timeout=30)
    deadline = time.monotonic() + 30
    while group_members(engine) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not group_members(engine), "the killed worker's engine is still running"
    running = [
        t for t in study.get_trials(deepcopy=False) if t.state == optuna.trial.TrialState.RUNNING
    ]
    assert len(running) == 1
    killed = running[0].number
    # A trial counts as dead once its worker has not beaten for the grace period (7 s at a 2-s
    # heartbeat). The next worker fails and re-queues it when it starts a trial after that: one
    # started sooner may finish both its trials first on a quiet box (seen in a fresh-clone
    # run), leaving it running. Start it when the killed trial is stale.
    time.sleep(max(0.0, killed_at + grace_for(2) + 1.0 - time.monotonic()))
    b = _worker(pg, "killed", tmp_path / "b", 2)
    out, _ = b.communicate(timeout=500)
    assert b.returncode == 0, out.decode()
    trials = study.get_trials(deepcopy=False)
    assert trials[killed].state == optuna.trial.TrialState.FAIL
    retried = [t for t in trials if t.system_attrs.get("failed_trial") == killed]
    assert retried and retried[0].state == optuna.trial.TrialState.COMPLETE
    assert retried[0].params == trials[killed].params
