"""The launcher against real stand-in processes: readiness, failure to start, stopping."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import sys
import time
from pathlib import Path

import pytest

from servetune.engines import LaunchSpec, free_port, launch, running, start
from servetune.engines.process import group_members
from servetune.errors import EngineError

FAKE = str(Path(__file__).with_name("fake_engine.py"))


def fake_spec(mode: str, name: str = "fake") -> LaunchSpec:
    port = free_port()
    return LaunchSpec(
        engine="fake",
        argv=[sys.executable, FAKE, mode, str(port), name],
        host="127.0.0.1",
        port=port,
        served_model_name=name,
    )


def assert_group_gone(pgid: int) -> None:
    assert group_members(pgid) == [], f"processes left in group {pgid}"


def test_free_port_is_bindable_and_not_in_use() -> None:
    port = free_port()
    assert 1024 < port < 65536
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # raises if the port were taken
        s.listen()
        # while we hold it, the next free port is another one
        assert free_port() != port


def test_ready_then_stop_leaves_no_process(tmp_path: Path) -> None:
    spec = fake_spec("serve")
    with running(spec, tmp_path / "engine.log", ready_timeout_s=30) as eng:
        assert eng.alive()
        members = group_members(eng.pgid)
        assert len(members) >= 2, "the fake engine and its child share the group"
        assert eng.base_url == f"http://127.0.0.1:{spec.port}/v1"
        pgid = eng.pgid
    assert_group_gone(pgid)
    log = (tmp_path / "engine.log").read_text()
    assert log.startswith("# servetune: ") and "mode=serve" in log


def test_async_context_manager(tmp_path: Path) -> None:
    from servetune.engines import arunning

    async def go() -> int:
        async with arunning(fake_spec("serve"), tmp_path / "e.log", 30) as eng:
            assert eng.alive()
            return eng.pgid

    assert_group_gone(asyncio.run(go()))


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("oom", "CUDA out of memory"),
        ("badflag", "unrecognized arguments: --no-such-flag"),
        ("silent", "wrote nothing to its log"),
    ],
)
def test_exit_at_start_is_reported_with_the_reason(
    tmp_path: Path, mode: str, expected: str
) -> None:
    spec = fake_spec(mode)
    t0 = time.monotonic()
    with pytest.raises(EngineError) as info:
        asyncio.run(launch(spec, tmp_path / "engine.log", ready_timeout_s=60))
    assert time.monotonic() - t0 < 20, "an exit is noticed at once, not at the timeout"
    assert expected in info.value.message
    assert "exited with status" in info.value.message
    assert str(tmp_path / "engine.log") in (info.value.hint or "")


def test_out_of_memory_hint_names_the_knobs(tmp_path: Path) -> None:
    with pytest.raises(EngineError) as info:
        asyncio.run(launch(fake_spec("oom"), tmp_path / "engine.log", ready_timeout_s=60))
    assert "max_num_seqs" in (info.value.hint or "")


def test_readiness_timeout_stops_the_process(tmp_path: Path) -> None:
    spec = fake_spec("hang")
    eng = start(spec, tmp_path / "engine.log")
    with pytest.raises(EngineError, match=r"did not become ready within 1\.5 s"):
        asyncio.run(eng.wait_ready(timeout_s=1.5))
    assert eng.alive()  # wait_ready only reports; launch() stops
    eng.stop(grace_s=5)
    assert_group_gone(eng.pgid)


def test_launch_stops_what_did_not_become_ready(tmp_path: Path) -> None:
    spec = fake_spec("unhealthy")
    with pytest.raises(EngineError, match="did not become ready"):
        asyncio.run(launch(spec, tmp_path / "engine.log", ready_timeout_s=2))
    log = (tmp_path / "engine.log").read_text()
    pid = int(re.search(r"pid=(\d+)", log).group(1))  # type: ignore[union-attr]
    assert_group_gone(pid)  # the fake led its own group


def test_failure_line_while_running_fails_after_grace(tmp_path: Path) -> None:
    eng = start(fake_spec("failing"), tmp_path / "engine.log")
    t0 = time.monotonic()
    try:
        with pytest.raises(EngineError) as info:
            asyncio.run(eng.wait_ready(timeout_s=60, failure_grace_s=1.0))
        assert time.monotonic() - t0 < 15
        assert "its log shows a failure" in info.value.message
        assert "KV cache is needed" in info.value.message
    finally:
        eng.stop(grace_s=5)
    assert_group_gone(eng.pgid)


def test_sigterm_ignored_falls_back_to_sigkill(tmp_path: Path) -> None:
    with running(fake_spec("stubborn"), tmp_path / "engine.log", 30) as eng:
        pgid = eng.pgid
        t0 = time.monotonic()
        eng.stop(grace_s=1.0)
        assert time.monotonic() - t0 < 10
        assert eng.returncode() == -9
    assert_group_gone(pgid)


def test_stop_is_idempotent(tmp_path: Path) -> None:
    """A second stop (and the context manager's) finds nothing to do: it returns the same
    exit status at once, signals nobody, and waits no grace period."""
    with running(fake_spec("serve"), tmp_path / "engine.log", 30) as eng:
        first = eng.stop()
        assert first == -signal.SIGTERM, "the engine ended by our SIGTERM"
        assert not eng.alive()
        assert_group_gone(eng.pgid)
        t0 = time.monotonic()
        assert eng.stop(grace_s=30) == first
        assert time.monotonic() - t0 < 5, "a second stop waited for a grace period"
    assert eng.returncode() == first


def test_missing_executable_is_an_engine_error(tmp_path: Path) -> None:
    spec = LaunchSpec(
        engine="llama.cpp",
        argv=[str(tmp_path / "no-such-llama-server")],
        host="127.0.0.1",
        port=free_port(),
        served_model_name="x",
    )
    with pytest.raises(EngineError, match="not found"):
        start(spec, tmp_path / "engine.log")


def test_does_not_touch_other_processes(tmp_path: Path) -> None:
    # A process of the same program started outside the launcher survives stop().
    import subprocess

    bystander = subprocess.Popen([sys.executable, FAKE, "hang", "1"], start_new_session=True)
    try:
        with running(fake_spec("serve"), tmp_path / "engine.log", 30):
            pass
        assert bystander.poll() is None
    finally:
        os.killpg(bystander.pid, 9)
        bystander.wait(10)


def test_engine_dies_with_the_process_that_started_it(tmp_path: Path) -> None:
    """A test run or tuner killed outright (SIGKILL) leaves no engine running."""
    import subprocess

    spec = fake_spec("hang")
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from servetune.engines import LaunchSpec, start\n"
            "eng = start(LaunchSpec.model_validate_json(sys.argv[1]), sys.argv[2])\n"
            "print(eng.pid, flush=True)\n"
            "time.sleep(600)\n",
            spec.model_dump_json(),
            str(tmp_path / "engine.log"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert parent.stdout is not None
    engine_pid = int(parent.stdout.readline())
    assert group_members(engine_pid) == [engine_pid]
    parent.kill()
    parent.wait(10)
    deadline = time.monotonic() + 15
    while group_members(engine_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert group_members(engine_pid) == []
