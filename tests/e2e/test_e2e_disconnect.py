"""A client that goes away mid-stream must stop the engine's work for it.

vLLM aborts the request: it leaves the running set and no more tokens are generated for it.
(The issue expected `vllm:request_success_total{finished_reason="abort"}` to count it: vLLM
0.32's CPU build does not — that counter stays 0 for a client disconnect, checked here, so
the evidence is the running gauge and the generation counter.) llama.cpp frees the slot.
The same must hold for servetune's own Ctrl-C: every in-flight request is cancelled, its
connection closed, and the engine stops generating for all of them.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from real_engines import scrape, series

from servetune.engines import EngineProcess, provisioned
from servetune.results.io import read_records, read_run_result

pytestmark = pytest.mark.real_engine

LONG = 900  # tokens asked for: ~5-10 s of generation, far longer than the test waits


def wait_for(what: str, cond: Callable[[], bool], timeout_s: float = 30.0) -> float:
    """Poll COND until true (bounded); returns the seconds it took."""
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout_s:
            raise AssertionError(f"not within {timeout_s:g} s: {what}")
        time.sleep(0.05)
    return time.monotonic() - t0


def busy_slots(eng: EngineProcess) -> int:
    with urllib.request.urlopen(f"{eng.spec.origin}/slots", timeout=10) as r:
        return sum(1 for s in json.load(r) if s.get("is_processing"))


def start_stream_and_drop(eng: EngineProcess, chunks: int = 3) -> None:
    """Open a long streamed completion, read a few chunks, then close the socket."""
    conn = http.client.HTTPConnection("127.0.0.1", eng.spec.port, timeout=60)
    body = {
        "model": "tiny",
        "prompt": "The server",
        "max_tokens": LONG,
        "stream": True,
        "ignore_eos": True,
    }
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200
    seen = 0
    while seen < chunks:
        line = resp.fp.readline()
        assert line, "the stream ended early"
        if line.startswith(b"data: {"):
            seen += 1
    conn.sock.close()  # gone mid-stream, as a client killed or timed out would be
    conn.close()


def generated(eng: EngineProcess, before: dict[str, float]) -> float:
    name = "vllm:generation_tokens_total"
    return series(scrape(eng), name) - series(before, name)


def assert_vllm_stopped(eng: EngineProcess, before: dict[str, float], n: int) -> None:
    """Nothing runs, nothing more is generated, none of the N requests completed."""
    wait_for("vLLM runs nothing", lambda: series(scrape(eng), "vllm:num_requests_running") == 0)
    first = generated(eng, before)
    time.sleep(1.0)  # a second in which a live request would add ~100 tokens
    assert generated(eng, before) == first, "tokens still generated after the abort"
    assert first < n * LONG / 2, f"{first} tokens generated of {n * LONG} asked"
    after = scrape(eng)
    done = "vllm:e2e_request_latency_seconds_count"
    assert series(after, done) == series(before, done), "a request ran to its end"


def test_vllm_aborts_a_dropped_stream(vllm8: EngineProcess) -> None:
    before = scrape(vllm8)
    start_stream_and_drop(vllm8)
    assert_vllm_stopped(vllm8, before, 1)


def test_llama_cpp_frees_the_slot_of_a_dropped_stream(llama8: EngineProcess) -> None:
    t0 = time.monotonic()
    start_stream_and_drop(llama8)
    waited = wait_for("llama.cpp frees the slot", lambda: busy_slots(llama8) == 0)
    # The full answer takes seconds; the slot is free long before it could have finished.
    print(f"llama.cpp freed the slot {waited:.2f} s after the drop")
    assert time.monotonic() - t0 < 30


def bench_cli(eng: EngineProcess, tiny: provisioned.TinyModel, out: Path, n: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "servetune.cli",
        "bench",
        "--base-url",
        eng.base_url,
        "--model",
        "tiny",
        "--tokenizer",
        str(tiny.hf_dir),
        "--random-input-len",
        "32",
        "--random-output-len",
        str(LONG),
        "--ignore-eos",
        "--num-prompts",
        str(n),
        "--request-rate",
        "inf",
        "--max-concurrency",
        str(n),
        "--result-dir",
        str(out),
        "--no-progress",
    ]


def ctrl_c(proc: subprocess.Popen[bytes]) -> None:
    """What a terminal does on Ctrl-C: SIGINT to the foreground process group."""
    os.killpg(proc.pid, signal.SIGINT)
    proc.wait(timeout=60)


@pytest.mark.parametrize("engine", ["vllm8", "llama8"])
def test_ctrl_c_cancels_every_in_flight_request(
    engine: str, tiny: provisioned.TinyModel, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    eng: EngineProcess = request.getfixturevalue(engine)
    n = 4
    before = scrape(eng)
    running = (
        (lambda: series(scrape(eng), "vllm:num_requests_running"))
        if engine == "vllm8"
        else (lambda: float(busy_slots(eng)))
    )
    proc = subprocess.Popen(bench_cli(eng, tiny, tmp_path / "run", n), start_new_session=True)
    try:
        wait_for(f"{n} requests running", lambda: running() == n, timeout_s=120)
    finally:
        ctrl_c(proc)
    if engine == "vllm8":
        assert_vllm_stopped(eng, before, n)
    else:
        wait_for("llama.cpp frees every slot", lambda: running() == 0)
    result = read_run_result(tmp_path / "run")
    assert result.status == "interrupted"
    records = read_records(tmp_path / "run")
    assert len(records) == n and all(r.status == "cancelled" for r in records)
