"""Real engines, started by servetune's launcher, serve the tiny model: /v1/models answers, a
streamed completion carries usage, a chat template works, and stopping leaves nothing behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from real_engines import llama_serving, port_closed

from servetune.engines import EngineProcess, provisioned
from servetune.engines.process import group_members

pytestmark = pytest.mark.real_engine

ENGINES = ["vllm8", "llama8"]


def post_stream(eng: EngineProcess, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """POST a streaming request; the parsed `data:` events, with [DONE] as {"done": True}."""
    req = urllib.request.Request(
        f"{eng.base_url}{path}",
        data=json.dumps({**body, "stream": True}).encode(),
        headers={"Content-Type": "application/json"},
    )
    events: list[dict[str, Any]] = []
    with urllib.request.urlopen(req, timeout=120) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            events.append({"done": True} if data == "[DONE]" else json.loads(data))
    return events


@pytest.mark.parametrize("engine", ENGINES)
def test_models_lists_the_served_name(engine: str, request: pytest.FixtureRequest) -> None:
    eng: EngineProcess = request.getfixturevalue(engine)
    with urllib.request.urlopen(f"{eng.base_url}/models", timeout=10) as r:
        ids = [m["id"] for m in json.load(r)["data"]]
    assert ids == ["tiny"]


@pytest.mark.parametrize("engine", ENGINES)
def test_streamed_completion_reports_usage(engine: str, request: pytest.FixtureRequest) -> None:
    eng: EngineProcess = request.getfixturevalue(engine)
    events = post_stream(
        eng,
        "/completions",
        {
            "model": "tiny",
            "prompt": "The server token model request",
            "max_tokens": 16,
            "ignore_eos": True,
            "stream_options": {"include_usage": True},
        },
    )
    assert events[-1] == {"done": True}
    usage = [e["usage"] for e in events if e.get("usage")]
    assert len(usage) == 1, "exactly one chunk carries usage"
    assert usage[0]["completion_tokens"] == 16  # ignore_eos: the full length, always
    assert usage[0]["prompt_tokens"] > 0
    texts = [c.get("text", "") for e in events for c in e.get("choices", [])]
    # Random weights: some chunks end inside a UTF-8 character, so chunks need not be tokens.
    assert 1 <= len(texts) <= 17


@pytest.mark.parametrize("engine", ENGINES)
def test_chat_template_applies(engine: str, request: pytest.FixtureRequest) -> None:
    eng: EngineProcess = request.getfixturevalue(engine)
    events = post_stream(
        eng,
        "/chat/completions",
        {
            "model": "tiny",
            "messages": [{"role": "user", "content": "hello"}],
            "max_tokens": 8,
            "ignore_eos": True,
            "stream_options": {"include_usage": True},
        },
    )
    usage = [e["usage"] for e in events if e.get("usage")]
    assert usage and usage[0]["completion_tokens"] == 8
    # ChatML wraps the 1-token-ish message in role markers: the prompt is longer than it.
    assert usage[0]["prompt_tokens"] >= 6


def test_llama_server_start_stop_leaves_nothing(
    llama_server: Path, tiny: provisioned.TinyModel, tmp_path: Path
) -> None:
    with llama_serving(llama_server, tiny, tmp_path, max_num_seqs=2) as eng:
        members = group_members(eng.pgid)
        assert eng.pid in members
        port = eng.spec.port
    # llama_serving asserted the group empty; the port answers no more either.
    assert port_closed(port)


def test_cli_start_then_stop(
    llama_server: Path, tiny: provisioned.TinyModel, tmp_path: Path
) -> None:
    """`servetune engine start` returns once the engine serves and leaves it running in its own
    group; `servetune engine stop` ends exactly that group."""
    state = tmp_path / "state"
    env = {**os.environ, "SERVETUNE_STATE_DIR": str(state)}
    cli = [sys.executable, "-m", "servetune.cli", "engine"]
    started = subprocess.run(
        [
            *cli,
            "start",
            "llama.cpp",
            "--tiny",
            "--max-num-seqs",
            "2",
            "--executable",
            str(llama_server),
            "--ready-timeout",
            "60",
        ],
        capture_output=True,
        env=env,
        text=True,
        timeout=120,
    )
    assert started.returncode == 0, started.stderr
    assert "ready: http://127.0.0.1:" in started.stdout
    record = json.loads((state / "llama.cpp.json").read_text())
    try:
        with urllib.request.urlopen(f"{record['base_url']}/models", timeout=10) as r:
            assert json.load(r)["data"][0]["id"] == "tiny"
        again = subprocess.run(
            [*cli, "start", "llama.cpp", "--tiny"],
            capture_output=True,
            env=env,
            text=True,
            timeout=60,
        )
        assert again.returncode == 2 and "already running" in again.stderr
    finally:
        stopped = subprocess.run(
            [*cli, "stop", "llama.cpp"],
            capture_output=True,
            env=env,
            text=True,
            timeout=60,
        )
    assert stopped.returncode == 0, stopped.stderr
    assert "stopped llama.cpp" in stopped.stdout
    assert group_members(record["pgid"]) == []
    assert not (state / "llama.cpp.json").exists()
