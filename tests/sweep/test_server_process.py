"""``--server-cmd``'s ServerProcess on real processes: it runs on the engine launcher's process
handling (failure quoted from the log, group stop, die-with-parent)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from servetune.engines.process import group_members
from servetune.errors import EngineError
from servetune.sweep.server import ServerProcess

HERE = Path(__file__).resolve().parent
PID_SERVER = HERE / "pid_server.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _gone(pid: int, timeout: float = 10.0) -> bool:
    """Whether pid ends (or is a zombie) within timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


def test_a_failed_start_quotes_the_line_that_says_why(tmp_path: Path) -> None:
    # vLLM's refusal, then a traceback's worth of lines after it: the reason is not the tail
    noise = "; ".join(f"print('  frame {i}')" for i in range(20))
    script = (
        "print('ValueError: User-specified max_model_len (131072) is greater than the derived "
        f"max_model_len (max_position_embeddings=32768 in model config.json).'); {noise}; "
        "raise SystemExit(1)"
    )
    port = _free_port()
    server = ServerProcess(
        f'{sys.executable} -c "{script}"', f"http://127.0.0.1:{port}/v1", ready_timeout_s=60
    )
    log = tmp_path / "server.log"
    with pytest.raises(EngineError) as info:
        server.start(log)
    message = info.value.message
    assert "exited with status 1" in message
    assert "User-specified max_model_len (131072) is greater than the derived" in message
    assert info.value.hint is not None and "max_model_len" in info.value.hint
    assert str(log) in info.value.hint
    assert server.proc is None and server.starts == 1


def test_stop_ends_every_process_the_command_started(tmp_path: Path) -> None:
    port = _free_port()
    cmd = f"sleep 300 & {sys.executable} {PID_SERVER} {port}"
    server = ServerProcess(cmd, f"http://127.0.0.1:{port}/v1", ready_timeout_s=60)
    server.start(tmp_path / "server.log")
    proc = server.proc
    assert proc is not None
    pgid = proc.pid
    try:
        assert len(group_members(pgid)) >= 3  # the shell, sleep, the server
        assert "pid_server" in (tmp_path / "server.log").read_text()
    finally:
        server.stop()
    assert group_members(pgid) == []
    assert server.proc is None
    server.stop()  # idempotent


def test_a_sweep_killed_mid_run_takes_its_server_with_it(tmp_path: Path) -> None:
    port = _free_port()
    base = f"http://127.0.0.1:{port}/v1"
    driver = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from servetune.sweep.server import ServerProcess\n"
        f"s = ServerProcess({f'{sys.executable} {PID_SERVER} {port}'!r}, {base!r}, "
        "ready_timeout_s=60)\n"
        f"s.start(Path({str(tmp_path / 'server.log')!r}))\n"
        "print('ready', flush=True)\n"
        "time.sleep(300)\n"
    )
    sweep = subprocess.Popen(
        [sys.executable, "-c", driver], stdout=subprocess.PIPE, start_new_session=True
    )
    server_pid = None
    try:
        assert sweep.stdout is not None
        assert sweep.stdout.readline().strip() == b"ready"
        with urllib.request.urlopen(base + "/models", timeout=10) as r:
            server_pid = int(json.load(r)["pid"])
        sweep.kill()  # no stop(), no atexit: only the kernel can tell the server
        sweep.wait(timeout=10)
        assert _gone(server_pid), "the server outlived the sweep that started it"
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.wait(timeout=10)
        if server_pid is not None and not _gone(server_pid, timeout=0.1):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(os.getpgid(server_pid), signal.SIGKILL)
