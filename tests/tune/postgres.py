"""A real PostgreSQL server for the tests: the Debian package's initdb/pg_ctl, a cluster in a
temporary directory, listening on a free loopback port, stopped afterwards."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.needs import SYSTEM_DEPS, need

from servetune.engines.process import free_port


def pg_bin() -> Path | None:
    """The directory holding initdb and pg_ctl (Debian puts them off PATH)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("initdb")
    return Path(on_path).parent if on_path else None


def _as_owner(cmd: list[str], owner: str | None) -> list[str]:
    # initdb and postgres refuse to run as root: run them as the package's postgres user
    return ["runuser", "-u", owner, "--", *cmd] if owner else cmd


@contextmanager
def postgres_server() -> Iterator[str]:
    """``postgresql://servetune@127.0.0.1:PORT/tune`` of a fresh server, stopped on exit."""
    bindir = pg_bin()
    need("PostgreSQL (initdb, pg_ctl)", bindir, SYSTEM_DEPS)
    assert bindir is not None
    owner = "postgres" if os.geteuid() == 0 else None
    if owner:
        need(
            "the postgres user (to run the server as non-root)",
            shutil.which("runuser"),
            SYSTEM_DEPS,
        )
    root = Path(tempfile.mkdtemp(prefix="servetune-pg-"))
    data = root / "data"
    if owner:
        os.chmod(root, 0o755)
        shutil.chown(root, owner, owner)
    port = free_port()
    log = root / "server.log"
    run = {"check": True, "capture_output": True, "timeout": 120}
    try:
        subprocess.run(
            _as_owner(
                [
                    str(bindir / "initdb"),
                    "-D",
                    str(data),
                    "-U",
                    "servetune",
                    "--auth=trust",
                    "-E",
                    "UTF8",
                    "--no-sync",
                ],
                owner,
            ),
            **run,  # type: ignore[arg-type]
        )
        subprocess.run(
            _as_owner(
                [
                    str(bindir / "pg_ctl"),
                    "-D",
                    str(data),
                    "-l",
                    str(log),
                    "-w",
                    "-t",
                    "60",
                    "-o",
                    f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off",
                    "start",
                ],
                owner,
            ),
            **run,  # type: ignore[arg-type]
        )
        import psycopg

        deadline = time.monotonic() + 30
        while True:
            try:
                with psycopg.connect(
                    f"postgresql://servetune@127.0.0.1:{port}/postgres",
                    autocommit=True,
                    connect_timeout=5,
                ) as conn:
                    conn.execute("CREATE DATABASE tune")
                break
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)
        yield f"postgresql://servetune@127.0.0.1:{port}/tune"
    finally:
        if (data / "postmaster.pid").exists():
            subprocess.run(
                _as_owner(
                    [
                        str(bindir / "pg_ctl"),
                        "-D",
                        str(data),
                        "-m",
                        "fast",
                        "-w",
                        "-t",
                        "60",
                        "stop",
                    ],
                    owner,
                ),
                capture_output=True,
                timeout=90,
                check=False,
            )
        shutil.rmtree(root, ignore_errors=True)
