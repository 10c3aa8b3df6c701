"""`servetune watch` against the simulated engine: live under tmux (the screen shows the
figures and the KV-full finding starting), the recording read by diagnose and drawn by the
report, --json, errors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from watch_fixtures import (
    HEALTHY,
    HEALTHY_LOAD,
    KV_FULL,
    KV_FULL_LOAD,
    load,
    sim_server,
    wait_for_traffic,
)

from servetune.cli import main
from servetune.results.watch_file import read_watch_recording

WATCH_S = 45


def _tmux(socket: str, *args: str) -> subprocess.CompletedProcess[str]:
    """tmux on a server of this test's own (-L): never another run's sessions (two test runs
    on one machine share the default server, and the session name was the same in both)."""
    return subprocess.run(["tmux", "-L", socket, *args], capture_output=True, text=True, timeout=10)


def _capture(socket: str) -> str:
    return _tmux(socket, "capture-pane", "-p", "-t", "watch").stdout


def test_watch_under_tmux_shows_figures_and_the_kv_full_finding(tmp_path: Path) -> None:
    from needs import SYSTEM_DEPS, need

    need("tmux", shutil.which("tmux"), SYSTEM_DEPS)
    rec = tmp_path / "rec"
    socket = f"servetune-watch-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    with sim_server(KV_FULL) as srv, load(srv.base_url, KV_FULL_LOAD, WATCH_S + 10, tmp_path / "b"):
        cmd = [sys.executable, "-m", "servetune.cli", "watch", f"http://127.0.0.1:{srv.port}",
               "--window", "10", "--for", "5", "--duration", str(WATCH_S),
               "--record", str(rec)]  # fmt: skip
        started = _tmux(socket, "new-session", "-d", "-s", "watch", "-x", "160", "-y", "50",
                        "COLUMNS=160 LINES=50 " + " ".join(cmd) + "; sleep 60")  # fmt: skip
        assert started.returncode == 0, started.stderr
        try:
            screen = ""
            deadline = time.monotonic() + WATCH_S + 15
            while time.monotonic() < deadline:
                time.sleep(2)
                screen = _capture(socket)
                # the finding shows within a window; the latency rows once requests have ended
                # (hundreds of tokens each: seconds later, by the drawn lengths)
                wanted = ("The KV pool is full", "kv_pool_full started", "TPOT", "E2E")
                if all(w in screen for w in wanted):
                    break
        finally:
            _tmux(socket, "kill-server")
    for want in ("servetune watch", "vllm", "req/s", "TTFT", "TPOT", "E2E", "KV cache",
                 "running", "waiting", "preemptions"):  # fmt: skip
        assert want in screen, f"{want!r} not on the screen:\n{screen}"
    assert "The KV pool is full" in screen, screen
    assert "kv_pool_full started" in screen, screen
    # the recording: samples and findings, readable (the watch may have been killed mid-way)
    r = read_watch_recording(rec)
    assert r.engine == "vllm" and r.samples >= 10
    assert any(e.rule == "kv_pool_full" and e.event == "start" for e in r.events)
    assert (rec / "server_metrics.jsonl").stat().st_size > 0
    # diagnose reads the recording and names the same bottleneck
    out = subprocess.run(
        [sys.executable, "-m", "servetune.cli", "diagnose", str(rec), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    diag = json.loads(out.stdout)
    assert diag["findings"][0]["rule"] == "kv_pool_full", diag["headline"]
    assert any("recording of servetune watch" in n for n in diag["notes"])
    # and the report draws it
    assert main(["report", str(rec), "--no-png"]) == 0
    html = (rec / "report.html").read_text()
    assert "Findings while watching" in html and "kv_pool_full" in html
    assert 'id="fig-server"' in html and 'id="fig-latency"' in html


def test_watch_json_on_a_healthy_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the load outlasts the watch however late it starts (it is stopped when the watch ends)
    with sim_server(HEALTHY) as srv, load(srv.base_url, HEALTHY_LOAD, 120, tmp_path / "b"):
        wait_for_traffic(srv)  # not a fixed sleep: a loaded box starts the bench late
        # --for 0: the bare rules at every refresh (the default hold of a minute would leave
        # nothing to check in 32 s). The default 30-s window: at 2 req/s a quarter of a
        # shorter one holds a few arrivals, and a stall of a loaded box's server process is
        # a rise of the requests in flight too (docs/watch.md).
        code = main(
            [
                "watch",
                srv.base_url,
                "--window",
                "30",
                "--interval",
                "0.5",
                "--for",
                "0",
                "--duration",
                "32",
                "--json",
            ]
        )
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    w = doc["window"]
    assert doc["engine"].startswith("vllm")
    assert w["requests_per_s"] > 0.5 and w["generation_tokens_per_s"] > 10
    assert w["latency_ms"]["ttft"]["p99"] > 0 and w["kv_cache_usage_mean"] is not None
    assert w["kv_cache_tokens"] and w["kv_cache_tokens"] > 1000
    assert not [a for a in doc["active"] if a in ("kv_pool_full", "overloaded")]


def test_unreachable_metrics_endpoint_is_explained(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    from servetune.engines.process import free_port

    port = free_port()
    assert main(["watch", f"http://127.0.0.1:{port}", "--duration", "2", "--json"]) == 2
    err = capsys.readouterr().err
    assert f"cannot watch http://127.0.0.1:{port}/metrics" in err
    assert "hint:" in err and "/metrics" in err
    # the scraper's bench wording ("the run goes on without them") contradicted the exit 2
    said = err + caplog.text
    assert "goes on without them" not in said


@pytest.mark.parametrize(
    "args,needle",
    [
        (["watch", "localhost:8000"], "not an http"),
        (["watch", "http://127.0.0.1:9", "--window", "1", "--interval", "1"], "two scrapes"),
        (["watch", "http://127.0.0.1:9", "--duration", "0"], "--duration"),
        # NaN passed the "<= 0" checks: --duration nan would watch forever
        (["watch", "http://127.0.0.1:9", "--duration", "nan"], "--duration must be > 0"),
        (["watch", "http://127.0.0.1:9", "--refresh", "nan"], "--refresh must be > 0"),
        # aiohttp's "InvalidUrlClientError"; export --metrics-url said "Connection refused"
        (["watch", "http://127.0.0.1:99999"], "not a valid URL"),
        (["export", "grafana", "--metrics-url", "http://127.0.0.1:99999"], "not a valid URL"),
    ],
)
def test_bad_flags(args: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(args) == 2
    assert needle in capsys.readouterr().err


@pytest.mark.parametrize("held", ["run.json", "sweep.json", "watch.json", "server_metrics.jsonl"])
def test_record_never_replaces_results_already_there(
    held: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`watch --record DIR` truncated DIR/server_metrics.jsonl: pointed at a bench run's
    folder (or an earlier recording) it destroyed that run's server metrics."""
    (tmp_path / held).write_text('{"t": 0, "values": {}}\n')
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert main(["watch", "http://127.0.0.1:9", "--duration", "1", "--record", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "already holds results" in err and held in err and "hint:" in err
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
