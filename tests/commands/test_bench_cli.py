"""``servetune bench`` as a user runs it: bad input gives a clear error, never a traceback;
Ctrl-C stops cleanly; ``kill -9`` keeps what was measured."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import run_cli

Factory = Callable[..., Any]


def assert_clean_error(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    for n in needles:
        assert n in proc.stderr, proc.stderr


def test_unreachable_url(tmp_path: Path) -> None:
    p = run_cli("bench", "--base-url", "http://127.0.0.1:9/v1", "--result-dir", str(tmp_path))
    assert_clean_error(p, "cannot reach http://127.0.0.1:9/v1/models", "hint:")


def test_model_not_served_lists_the_served_ones(scripted: Factory, tmp_path: Path) -> None:
    srv = scripted({})
    p = run_cli(
        "bench", "--base-url", srv.base_url, "--model", "gpt-9", "--result-dir", str(tmp_path)
    )
    assert_clean_error(p, "'gpt-9' is not served", "scripted-model")


def test_dataset_missing_and_malformed(scripted: Factory, tmp_path: Path) -> None:
    srv = scripted({})
    p = run_cli(
        "bench",
        "--base-url",
        srv.base_url,
        "--dataset-name",
        "jsonl",
        "--dataset-path",
        str(tmp_path / "nope.jsonl"),
        "--result-dir",
        str(tmp_path / "r1"),
    )
    assert_clean_error(p, "not found", "nope.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "fine"}\n{"prompt": }\n')
    p = run_cli(
        "bench",
        "--base-url",
        srv.base_url,
        "--dataset-name",
        "jsonl",
        "--dataset-path",
        str(bad),
        "--result-dir",
        str(tmp_path / "r2"),
    )
    assert_clean_error(p, "bad.jsonl:2: not valid JSON")


def test_input_beyond_max_model_len(scripted: Factory, tmp_path: Path) -> None:
    srv = scripted({"max_model_len": 512})
    p = run_cli(
        "bench",
        "--base-url",
        srv.base_url,
        "--random-input-len",
        "600",
        "--result-dir",
        str(tmp_path),
    )
    assert_clean_error(p, "beyond the server's max_model_len of 512", "--random-input-len")


@pytest.mark.parametrize("rate", ["0", "-3"])
def test_non_positive_rate(scripted: Factory, tmp_path: Path, rate: str) -> None:
    srv = scripted({})
    p = run_cli(
        "bench", "--base-url", srv.base_url, f"--request-rate={rate}", "--result-dir", str(tmp_path)
    )
    assert_clean_error(p, "--request-rate must be > 0")


def test_result_dir_that_cannot_be_written(scripted: Factory, tmp_path: Path) -> None:
    srv = scripted({})
    blocker = tmp_path / "file"
    blocker.write_text("x")
    p = run_cli("bench", "--base-url", srv.base_url, "--result-dir", str(blocker / "run"))
    assert_clean_error(p, "cannot write results to", "--result-dir")


def test_bad_goodput_spec(scripted: Factory, tmp_path: Path) -> None:
    srv = scripted({})
    p = run_cli(
        "bench", "--base-url", srv.base_url, "--goodput", "latency:5", "--result-dir", str(tmp_path)
    )
    assert_clean_error(p, "--goodput 'latency:5'")


def test_summary_printed_and_result_readable_by_vllm_scripts(
    scripted: Factory, tmp_path: Path
) -> None:
    srv = scripted({"ttft_ms": 5, "tpot_ms": 1})
    p = run_cli(
        "bench",
        "--base-url",
        srv.base_url,
        "--num-prompts",
        "20",
        "--request-rate",
        "40",
        "--random-input-len",
        "64",
        "--random-output-len",
        "8",
        "--result-dir",
        str(tmp_path),
        "--no-progress",
    )
    assert p.returncode == 0, p.stderr
    assert "Successful requests" in p.stdout and "Time to first token" in p.stdout
    data = json.loads((tmp_path / "run.json").read_text())
    assert data["completed"] == 20 and data["request_rate"] == 40
    assert data["mean_ttft_ms"] > 5 and data["kind"] == "run"


def _metrics(url: str) -> dict[str, float]:
    text = urllib.request.urlopen(url.replace("/v1", "/metrics"), timeout=5).read().decode()
    return {k: float(v) for k, v in (line.split() for line in text.splitlines() if line)}


def _start_bench(url: str, out: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "servetune.cli",
            "bench",
            "--base-url",
            url,
            "--result-dir",
            str(out),
            "--no-progress",
            "--random-input-len",
            "16",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for(cond: Callable[[], bool], timeout: float) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def test_ctrl_c_cancels_in_flight_and_still_writes_the_summary(
    scripted: Factory, tmp_path: Path
) -> None:
    srv = scripted({"ttft_ms": 50, "tpot_ms": 100})  # 20 tokens ≈ 2 s per request
    proc = _start_bench(
        srv.base_url,
        tmp_path,
        "--request-rate",
        "20",
        "--num-prompts",
        "400",
        "--random-output-len",
        "20",
    )
    _wait_for(lambda: _metrics(srv.base_url)["scripted:requests_total"] >= 30, 60)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    data = json.loads((tmp_path / "run.json").read_text())
    assert data["status"] == "interrupted"
    assert data["summary"]["cancelled"] >= 10  # every in-flight request, recorded as cancelled
    # the server saw the disconnects and stopped generating for them
    _wait_for(lambda: _metrics(srv.base_url)["scripted:running"] == 0, 10)
    assert _metrics(srv.base_url)["scripted:aborted_total"] >= 10


def test_kill_9_keeps_every_request_finished_a_second_before(
    scripted: Factory, tmp_path: Path
) -> None:
    srv = scripted({"ttft_ms": 5, "tpot_ms": 5})
    proc = _start_bench(
        srv.base_url,
        tmp_path,
        "--request-rate",
        "30",
        "--num-prompts",
        "3000",
        "--random-output-len",
        "6",
    )
    _wait_for(lambda: _metrics(srv.base_url)["scripted:completed_total"] >= 40, 60)
    done_before = _metrics(srv.base_url)["scripted:completed_total"]
    # Finished at the server; the client finishes them when its loop reads the last bytes,
    # which a loaded box delays (seen: 34 of 47 on disk 1.2 s later). The sink flushes every
    # 0.5 s: 3 s leaves 2.5 s for the client's lag and still fails a sink that waits for the
    # end of the run (100 s) or flushes far less often.
    time.sleep(3.0)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    lines = (tmp_path / "requests.jsonl").read_bytes().split(b"\n")
    parsed = []
    for i, line in enumerate(lines):
        if not line:
            continue
        try:
            parsed.append(json.loads(line))
        except json.JSONDecodeError:
            assert i == len(lines) - 1, "only a last, torn line may be unreadable"
    assert len(parsed) >= done_before
    from servetune.results.io import read_records

    assert len(read_records(tmp_path)) == len(parsed)


def test_a_run_on_the_simulated_engine_records_its_configuration(tmp_path: Path) -> None:
    """bench without --base-url starts the simulated engine with known knobs: the run records
    them (target.simulated), so diagnose reads the batch cap from the configuration (not
    "--max-num-seqs ? → 2× the current value") and cost knows the GPU."""
    from servetune.diagnose.knobs import known_config
    from servetune.results.io import read_run_result

    out = tmp_path / "run"
    proc = run_cli(
        "bench",
        "--max-num-seqs",
        "48",
        "--num-prompts",
        "6",
        "--request-rate",
        "inf",
        "--random-input-len",
        "32",
        "--random-output-len",
        "4",
        "--no-progress",
        "--result-dir",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    run = read_run_result(out)
    sim = run.target.simulated
    assert sim is not None and sim["max_num_seqs"] == 48 and sim["gpu"] == "A100-80GB"
    assert sim["memory"]["kv_cache_tokens"] > 0
    known = known_config(run)
    assert known.values["max_num_seqs"] == 48 and known.gpu == "A100-80GB"
    cost = run_cli("cost", str(out))
    assert cost.returncode == 0, cost.stderr
    assert "A100-80GB" in cost.stdout
