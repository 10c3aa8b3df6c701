"""``--server-cmd``: start the server under test, wait until it serves, stop exactly it.

The command runs through ``/bin/sh`` in a new session (its own process group), its output goes
to a log file, readiness is ``GET <base-url>/models`` answering 200, and stopping sends SIGTERM
then SIGKILL to that process group only — never to anything found by name.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import IO

from servetune.errors import EngineError


def _tail(path: Path, lines: int = 8) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(text[-lines:])


class ServerProcess:
    """A server started from a shell command line (see the module docstring)."""

    def __init__(
        self,
        cmd: str,
        base_url: str,
        *,
        ready_timeout_s: float = 600.0,
        stop_timeout_s: float = 30.0,
        echo: Callable[[str], None] = print,
    ) -> None:
        self.cmd = cmd
        self.ready_url = base_url.rstrip("/") + "/models"
        self.ready_timeout_s = ready_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.echo = echo
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self.log_path: Path | None = None
        self.starts = 0

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.ready_url, timeout=2.0) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def start(self, log_path: Path) -> None:
        if self._ready():
            raise EngineError(
                f"something already answers at {self.ready_url} before --server-cmd started",
                hint="stop that server, or drop --server-cmd to test the running one",
            )
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path = log_path
        self._log = log_path.open("ab")
        self.proc = subprocess.Popen(
            self.cmd,
            shell=True,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.starts += 1
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            code = self.proc.poll()
            if code is not None:
                self._close_log()
                raise EngineError(
                    f"the server command exited with status {code} before it was ready:\n"
                    f"{_tail(log_path)}",
                    hint=f"see the whole log in {log_path}",
                )
            if self._ready():
                return
            time.sleep(0.25)
        self.stop()
        raise EngineError(
            f"the server did not answer {self.ready_url} within {self.ready_timeout_s:g} s",
            hint=f"see {log_path}; raise --server-ready-timeout for slow starts",
        )

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            if proc.poll() is None:
                self._signal(proc, signal.SIGTERM)
                try:
                    proc.wait(timeout=self.stop_timeout_s)
                except subprocess.TimeoutExpired:
                    self._signal(proc, signal.SIGKILL)
                    proc.wait(timeout=10)
            else:
                # The shell is gone; children it left in the group still go.
                self._signal(proc, signal.SIGKILL)
        finally:
            self._close_log()

    @staticmethod
    def _signal(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
        try:
            os.killpg(proc.pid, sig)  # the group we created with start_new_session
        except ProcessLookupError:
            pass
