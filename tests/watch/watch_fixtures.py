"""Shared pieces of the watch and export tests: simulated servers under load, a real
Prometheus on loopback, and the scenarios (a KV pool that fills, a healthy server).
Imported by name (conftest.py holds the fixtures)."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from servetune.engines.process import free_port
from servetune.sim.config import EngineConfig
from servetune.sim.embedded import EmbeddedServer, start_embedded

# A KV pool far too small for the load: at 5 req/s of ~2.5k-token requests KV use passes 90%
# within ~10 s and preemptions follow (the simulator's offline run shows the same).
KV_FULL = EngineConfig(max_model_len=8192, gpu_memory_utilization=0.25)
KV_FULL_LOAD = ["--request-rate", "5", "--random-input-len", "2048", "--random-output-len", "512",
                "--random-range-ratio", "0.5"]  # fmt: skip
HEALTHY = EngineConfig()
HEALTHY_LOAD = ["--request-rate", "2", "--random-input-len", "512", "--random-output-len", "64"]


@contextlib.contextmanager
def sim_server(cfg: EngineConfig) -> Iterator[EmbeddedServer]:
    srv = start_embedded(cfg)
    try:
        yield srv
    finally:
        srv.stop()


def wait_for_traffic(srv: EmbeddedServer, timeout_s: float = 60.0) -> None:
    """Until the server has generated tokens: the bench process needs seconds to start
    sending (imports, its probe of the server), more on a loaded box."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with urllib.request.urlopen(srv.metrics_url, timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith("vllm:generation_tokens_total") and float(line.split()[-1]):
                    return
        time.sleep(0.2)
    raise AssertionError(f"the bench sent nothing to {srv.base_url} within {timeout_s:g} s")


@contextlib.contextmanager
def load(
    base_url: str, args: list[str], seconds: float, out: Path
) -> Iterator[subprocess.Popen[str]]:
    """`servetune bench` sending for ``seconds`` (it stops by itself; killed if still there)."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "servetune.cli",
            "bench",
            "--base-url",
            base_url,
            "--duration",
            str(seconds),
            "--result-dir",
            str(out),
            "--no-progress",
            "--request-timeout",
            "60",
            *args,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


class Prometheus:
    def __init__(self, proc: subprocess.Popen[str], port: int, log: Path) -> None:
        self.proc = proc
        self.url = f"http://127.0.0.1:{port}"
        self.log = log

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=5) as resp:
            return json.loads(resp.read())

    def alerts(self) -> list[dict[str, Any]]:
        data: list[dict[str, Any]] = self.get("/api/v1/alerts")["data"]["alerts"]
        return data


@contextlib.contextmanager
def prometheus(tmp: Path, targets: list[str], rules: Path | None) -> Iterator[Prometheus]:
    """A real Prometheus on a free loopback port, 1 s scrapes and evaluations, its data in a
    temp dir; stopped afterwards."""
    exe = shutil.which("prometheus")
    assert exe is not None
    port = free_port()
    cfg = tmp / "prometheus.yml"
    body: dict[str, Any] = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [{"job_name": "sim", "static_configs": [{"targets": targets}]}],
    }
    if rules is not None:
        body["rule_files"] = [str(rules)]
    cfg.write_text(json.dumps(body))  # JSON is YAML
    log = tmp / "prometheus.log"
    with log.open("w") as fh:
        proc = subprocess.Popen(
            [
                exe,
                f"--config.file={cfg}",
                f"--storage.tsdb.path={tmp / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=fh,
            stderr=subprocess.STDOUT,
            text=True,
        )
    p = Prometheus(proc, port, log)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                p.get("/api/v1/status/buildinfo")
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"prometheus did not start: {log.read_text()[-800:]}"
                    ) from None
                time.sleep(0.2)
        yield p
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
