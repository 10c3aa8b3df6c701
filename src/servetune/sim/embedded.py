"""The simulated engine as the default target: a server process on a free loopback port.

The server runs in its own process (``python -m servetune.sim.server``), so its event loop
and the load generator's never share a core's time slice by design; ``start_embedded``
returns once it answers, and ``stop`` ends exactly the process it started.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from collections import deque

from servetune.errors import SimError
from servetune.sim.config import EngineConfig
from servetune.sim.memory import plan_memory
from servetune.sim.step_writer import writer_mode

_READY_TIMEOUT_S = 60.0
"""It answers in ~1 s; the bound is for a loaded 2-core box."""


class EmbeddedServer:
    """A running simulated server: ``base_url`` (…/v1), ``port``, ``stop()``."""

    def __init__(self, proc: subprocess.Popen[str], port: int, cfg: EngineConfig) -> None:
        self.proc = proc
        self.port = port
        self.config = cfg
        self.url = f"http://127.0.0.1:{port}"
        self.base_url = f"{self.url}/v1"
        self.metrics_url = f"{self.url}/metrics"
        self._log: deque[str] = deque(maxlen=200)
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._log.append(line.rstrip())

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the server process we started (and only it)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)

    async def astop(self) -> None:
        await asyncio.to_thread(self.stop)

    def __enter__(self) -> EmbeddedServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_embedded(
    engine_cfg: EngineConfig, port: int = 0, writer: str = "plain"
) -> EmbeddedServer:
    """Start the real-time simulated server on 127.0.0.1 (``port`` 0 = any free port;
    ``writer``: :mod:`servetune.sim.step_writer`'s setting)."""
    plan_memory(engine_cfg)  # a configuration vLLM would refuse fails here, in this process
    writer_mode(writer)
    cmd = [
        sys.executable,
        "-m",
        "servetune.sim.server",
        "--config-json",
        engine_cfg.model_dump_json(),
        "--port",
        str(port),
        "--writer",
        writer,
        "--exit-with-parent",
        str(os.getpid()),
    ]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    assert proc.stdout is not None
    result: list[str] = []
    before: deque[str] = deque(maxlen=20)
    """What the process printed before its READY/ERROR line (a traceback when it died)."""

    def first_line() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith(("READY", "ERROR")):
                result.append(line.strip())
                return
            before.append(line.rstrip())

    t0 = time.monotonic()
    t = threading.Thread(target=first_line, daemon=True)
    t.start()
    t.join(_READY_TIMEOUT_S)
    if not result or result[0].startswith("ERROR"):
        if proc.poll() is None:
            proc.kill()
        code = proc.wait(5)
        if result:
            why = result[0][6:]
        elif t.is_alive():
            why = f"no READY line within {_READY_TIMEOUT_S:.0f} s"
        else:
            why = f"it exited with code {code} after {time.monotonic() - t0:.1f} s"
        tail = "\n".join(before)
        raise SimError(
            f"the simulated server did not start: {why}"
            + (f"; its output:\n{tail}" if tail else "")
        )
    return EmbeddedServer(proc, int(result[0].split()[1]), engine_cfg)


async def astart_embedded(
    engine_cfg: EngineConfig, port: int = 0, writer: str = "plain"
) -> EmbeddedServer:
    return await asyncio.to_thread(start_embedded, engine_cfg, port, writer)
