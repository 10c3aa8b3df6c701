"""``--server-cmd``: start the server under test, wait until it serves, stop exactly it.

The process handling is the engine launcher's (:mod:`servetune.engines.process`): the command
runs in a new session (its own process group) with its output in a log file, a failure to
start is recognised from that log and quoted (:mod:`servetune.engines.failures`), stopping
sends SIGTERM then SIGKILL to that process group only — never to anything found by name — and
waits until it is empty, and the server gets SIGTERM if the sweep dies without stopping it.
Readiness is ``GET <base-url>/models`` answering 200 (the server's kind is unknown: no
``/health`` or model name is assumed).
"""

from __future__ import annotations

import asyncio
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp

from servetune.engines.commands import LaunchSpec
from servetune.engines.process import EngineProcess, launch
from servetune.errors import EngineError

ENGINE_LABEL = "the server command"
"""How errors name the process (in place of an engine's name)."""
CMD_ENV = "SERVETUNE_SERVER_CMD"

# The shell runs the command in the background and waits for it, so that a SIGTERM to the
# shell alone (the launcher's die-with-parent signal reaches only the process it started)
# takes the whole group down: a shell waiting on a foreground command would run its trap only
# after the command ended. eval keeps the command's own syntax (lists, pipes, assignments).
_SUPERVISED = f'trap "trap - TERM; kill 0" TERM; eval "${CMD_ENV}" & wait $!'


def command_spec(cmd: str, base_url: str) -> LaunchSpec:
    """The launcher's description of ``cmd``: run by /bin/sh, answering at ``base_url``."""
    parts = urlsplit(base_url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return LaunchSpec(
        engine=ENGINE_LABEL,
        argv=["/bin/sh", "-c", _SUPERVISED],
        env={CMD_ENV: cmd},
        host=parts.hostname or "127.0.0.1",
        port=port,
        served_model_name="",
    )


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
        self.spec = command_spec(cmd, base_url)
        self.ready_timeout_s = ready_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.echo = echo
        self.engine: EngineProcess | None = None
        self.log_path: Path | None = None
        self.starts = 0

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        """The shell the command runs in (the leader of its process group), while started."""
        return self.engine.proc if self.engine is not None else None

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.ready_url, timeout=2.0) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError, ValueError):
            return False

    async def _answers(self, session: aiohttp.ClientSession) -> bool:
        try:
            async with session.get(self.ready_url) as resp:
                return resp.status == 200
        except (TimeoutError, aiohttp.ClientError, ValueError):
            return False

    def start(self, log_path: Path) -> None:
        """Start the command and wait until it serves; on failure it is stopped and an
        :class:`EngineError` quotes the log line that says why."""
        if self._ready():
            raise EngineError.over_fields(
                f"something already answers at {self.ready_url} before {{server_cmd}} started",
                hint="stop that server, or drop {server_cmd} to test the running one",
            )
        self.log_path = log_path
        self.starts += 1
        # Called from the sweep's main thread (no loop running there): the die-with-parent
        # signal is tied to the thread that starts the process, which lives as long as the sweep.
        self.engine = asyncio.run(
            launch(self.spec, log_path, self.ready_timeout_s, ready=self._answers)
        )

    def stop(self) -> None:
        engine, self.engine = self.engine, None
        if engine is not None:
            engine.stop(grace_s=self.stop_timeout_s)
