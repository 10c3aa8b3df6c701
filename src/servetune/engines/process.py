"""One engine process: start it in its own process group, wait until it serves, stop it.

The engine runs in a new session (``start_new_session``) so that its whole tree — vLLM's API
server and its engine-core child, say — shares one process group that we alone created.
Stopping signals exactly that group (SIGTERM, then SIGKILL after a grace period) and waits
until no live process is left in it. Nothing is ever looked up or killed by name.

Readiness is ``GET /health`` answering 200, then ``GET /v1/models`` listing the served model,
within a bounded time. Failure to start is recognised from the process exiting or from its log
(see :mod:`servetune.engines.failures`) and raised as :class:`EngineError` quoting the line.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import IO

import aiohttp

from servetune.engines.commands import LaunchSpec
from servetune.engines.failures import StartFailure, last_error_line, recognise
from servetune.errors import EngineError
from servetune.profiles import failure_patterns

DEFAULT_READY_TIMEOUT_S = 300.0
DEFAULT_STOP_GRACE_S = 15.0
# A failure line seen while the process still runs: it gets this long to exit or become ready
# (a warning can match a pattern; a real failure ends the process well within it).
FAILURE_LINE_GRACE_S = 10.0
LOG_HEADER = "# servetune: "  # our first line in every engine log: the command that ran

ReadyCheck = Callable[[aiohttp.ClientSession], Awaitable[bool]]
"""Does the process serve yet? (one probe; the default is the engines' /health + /v1/models)"""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on HOST now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is PGID."""
    members: list[int] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        entries = []
    if not entries:  # no procfs: signal 0 says whether anything is left
        try:
            os.killpg(pgid, 0)
            return [pgid]
        except (ProcessLookupError, PermissionError):
            return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                stat = f.read()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) >= 3 and fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry))
    return members


def process_start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (tells a reused PID apart)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    return int(fields[19]) if len(fields) > 19 else None


class EngineProcess:
    """A started engine. Use :func:`launch` / :func:`running` rather than building one."""

    def __init__(self, spec: LaunchSpec, log_path: Path, proc: subprocess.Popen[bytes]) -> None:
        self.spec = spec
        self.log_path = log_path
        self.proc = proc
        self.pid = proc.pid
        self.pgid = proc.pid  # start_new_session: the child leads its own group
        self._log_offset = 0
        self._log_lines: list[str] = []
        self._failure_seen_at: float | None = None

    # -- state ---------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        return self.spec.base_url

    def alive(self) -> bool:
        return self.proc.poll() is None

    def returncode(self) -> int | None:
        return self.proc.poll()

    def log_lines(self) -> list[str]:
        """All log lines so far (read incrementally from the file)."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._log_offset)
                chunk = f.read()
        except OSError:
            return self._log_lines
        if chunk:
            # Keep a partial last line for the next read.
            cut = chunk.rfind(b"\n") + 1
            if cut:
                self._log_offset += cut
                text = chunk[:cut].decode("utf-8", errors="replace")
                self._log_lines.extend(text.splitlines())
        return self._log_lines

    def engine_lines(self) -> list[str]:
        """The log lines the engine wrote (without our header)."""
        return [ln for ln in self.log_lines() if not ln.startswith(LOG_HEADER)]

    def failure(self) -> StartFailure | None:
        return recognise(self.engine_lines(), failure_patterns(self.spec.engine))

    def _start_error(self, why: str) -> EngineError:
        lines = self.engine_lines()
        found = recognise(lines, failure_patterns(self.spec.engine))
        if found is not None:
            return EngineError(
                f"{self.spec.engine} failed to start ({why}): {found.line}",
                hint=f"{found.hint} (log: {self.log_path})",
            )
        last = last_error_line(lines)
        detail = f": {last}" if last else " and wrote nothing to its log"
        return EngineError(
            f"{self.spec.engine} failed to start ({why}){detail}",
            hint=f"full log: {self.log_path}; command: {self.spec.shell()}",
        )

    # -- readiness -----------------------------------------------------------------------
    async def wait_ready(
        self,
        timeout_s: float = DEFAULT_READY_TIMEOUT_S,
        failure_grace_s: float = FAILURE_LINE_GRACE_S,
        ready: ReadyCheck | None = None,
    ) -> float:
        """Wait until the engine serves; returns the seconds waited. Raises EngineError when
        the process exits, its log shows a failure it does not recover from, or time runs out.
        The caller stops the process on error (``launch`` does). ``ready``: another probe
        than /health + the served model in /v1/models (a server of unknown kind)."""
        probe = ready or self._ready
        t0 = time.monotonic()
        deadline = t0 + timeout_s
        timeout = aiohttp.ClientTimeout(total=5.0)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while True:
                if not self.alive():
                    raise self._start_error(f"exited with status {self.returncode()}")
                if self.failure() is not None:
                    now = time.monotonic()
                    if self._failure_seen_at is None:
                        self._failure_seen_at = now
                    elif now - self._failure_seen_at > failure_grace_s:
                        raise self._start_error("still running, but its log shows a failure")
                if await probe(session):
                    return time.monotonic() - t0
                if time.monotonic() > deadline:
                    raise EngineError(
                        f"{self.spec.engine} did not become ready within {timeout_s:g} s "
                        f"at {self.spec.origin}",
                        hint=f"its log: {self.log_path}; raise the readiness timeout if it "
                        "is only slow",
                    )
                await asyncio.sleep(0.25)  # poll interval, bounded by the deadline above

    async def _ready(self, session: aiohttp.ClientSession) -> bool:
        try:
            async with session.get(f"{self.spec.origin}/health") as r:
                if r.status != 200:
                    return False
            async with session.get(f"{self.spec.base_url}/models") as r:
                if r.status != 200:
                    return False
                body = await r.json(content_type=None)
        except (TimeoutError, aiohttp.ClientError, ValueError):
            return False
        if not isinstance(body, dict) or not isinstance(body.get("data"), list):
            return False
        ids = [m.get("id") for m in body["data"] if isinstance(m, dict)]
        return self.spec.served_model_name in ids

    # -- stopping ------------------------------------------------------------------------
    def stop(self, grace_s: float = DEFAULT_STOP_GRACE_S) -> int | None:
        """SIGTERM the process group, SIGKILL what is left after GRACE_S; returns the exit
        status of the process we started. Idempotent."""
        terminate_group(self.pgid, grace_s, leader=self.proc)
        self.spec.remove_files()
        return self.proc.poll()

    async def astop(self, grace_s: float = DEFAULT_STOP_GRACE_S) -> int | None:
        return await asyncio.to_thread(self.stop, grace_s)

    def __enter__(self) -> EngineProcess:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    async def __aenter__(self) -> EngineProcess:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.astop()


def terminate_group(
    pgid: int, grace_s: float = DEFAULT_STOP_GRACE_S, leader: subprocess.Popen[bytes] | None = None
) -> bool:
    """SIGTERM process group PGID, then SIGKILL it if anything lives after GRACE_S; wait
    (bounded) until it is empty. Returns True when the group is gone."""

    def reap() -> None:
        if leader is not None:
            leader.poll()

    def signal_group(sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)

    reap()
    if not group_members(pgid):
        return True
    signal_group(signal.SIGTERM)
    if _wait_group_empty(pgid, grace_s, reap):
        return True
    signal_group(signal.SIGKILL)
    return _wait_group_empty(pgid, 10.0, reap)


def _wait_group_empty(pgid: int, timeout_s: float, reap: Callable[[], None]) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        reap()
        if not group_members(pgid):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM this process when the thread that started it dies
    (Linux prctl PR_SET_PDEATHSIG), so a killed test run or tuner leaves no engine behind."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the caller's stop() is the only guard


def start(spec: LaunchSpec, log_path: Path | str, *, die_with_parent: bool = True) -> EngineProcess:
    """Start SPEC's process now (not waiting for readiness), its output into LOG_PATH.

    ``die_with_parent`` (Linux): the engine gets SIGTERM if the thread that started it dies
    without stopping it — call from a long-lived thread (the main one, or the event loop's);
    `servetune engine start`, which leaves the engine running on purpose, turns it off.
    """
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **spec.env}
    spec.write_files()
    log: IO[bytes] = open(log_path, "ab")  # noqa: SIM115 - the child keeps it
    try:
        log.write(f"{LOG_HEADER}{spec.shell()}\n".encode())
        log.flush()
        proc = subprocess.Popen(
            spec.argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=_die_with_parent if die_with_parent and sys.platform == "linux" else None,
        )
    except FileNotFoundError as exc:
        spec.remove_files()
        raise EngineError.over_fields(
            f"{spec.engine}: cannot run {spec.argv[0]!r}: not found",
            hint="install the engine, or give its path ({executable}); "
            "the test engines come from scripts/provision_engines.sh",
        ) from exc
    except PermissionError as exc:
        spec.remove_files()
        raise EngineError(f"{spec.engine}: cannot run {spec.argv[0]!r}: {exc}") from exc
    finally:
        log.close()  # the child holds its own copy of the descriptor
    return EngineProcess(spec, log_path, proc)


async def launch(
    spec: LaunchSpec,
    log_path: Path | str,
    ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S,
    *,
    die_with_parent: bool = True,
    ready: ReadyCheck | None = None,
) -> EngineProcess:
    """Start SPEC and wait until it serves (``ready``: see :meth:`EngineProcess.wait_ready`).
    On any failure the process group is stopped before the error propagates."""
    eng = start(spec, log_path, die_with_parent=die_with_parent)
    try:
        await eng.wait_ready(ready_timeout_s, ready=ready)
    except BaseException:
        await eng.astop(grace_s=5.0)
        raise
    return eng


def launch_sync(
    spec: LaunchSpec, log_path: Path | str, ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S
) -> EngineProcess:
    return asyncio.run(launch(spec, log_path, ready_timeout_s))


@contextlib.contextmanager
def running(
    spec: LaunchSpec, log_path: Path | str, ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S
) -> Iterator[EngineProcess]:
    """``with running(spec, log) as eng:`` — a ready engine, stopped on exit."""
    eng = launch_sync(spec, log_path, ready_timeout_s)
    try:
        yield eng
    finally:
        eng.stop()


@contextlib.asynccontextmanager
async def arunning(
    spec: LaunchSpec, log_path: Path | str, ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S
) -> AsyncIterator[EngineProcess]:
    """``async with arunning(spec, log) as eng:`` — a ready engine, stopped on exit."""
    eng = await launch(spec, log_path, ready_timeout_s)
    try:
        yield eng
    finally:
        await eng.astop()
