"""A real Redis (Debian's redis-server) on a free loopback port in a temporary directory, for
the gateway's tests. A plain module (not conftest.py): tests import from it by name, and two
folders' conftest modules share the name ``conftest``, so ``from conftest import …`` gets
whichever was collected last."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

from needs import SYSTEM_DEPS, need


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    def __init__(self, proc: subprocess.Popen[bytes], port: int) -> None:
        self.proc = proc
        self.port = port
        self.url = f"redis://127.0.0.1:{port}/0"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def start_redis(tmp: Path, port: int | None = None) -> RedisServer:
    """A Redis without persistence (``port``: a given one, e.g. to restart on it)."""
    exe = shutil.which("redis-server")
    need("redis-server (Debian package)", exe, SYSTEM_DEPS)
    assert exe is not None
    port = port or free_port()
    proc = subprocess.Popen(
        [
            exe,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(tmp),
            "--save",
            "",
            "--appendonly",
            "no",
            "--protected-mode",
            "yes",
            "--loglevel",
            "warning",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"redis-server exited with {proc.returncode}")
        with socket.socket() as s:
            s.settimeout(0.5)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                s.sendall(b"PING\r\n")
                if s.recv(64).startswith(b"+PONG"):
                    return RedisServer(proc, port)
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("redis-server did not answer within 20 s")
