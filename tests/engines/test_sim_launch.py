"""The launcher runs servetune's own simulated engine as a child process, like any engine."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from pathlib import Path

import pytest

from servetune.engines import EngineKnobs, EngineOptions, build_command, free_port, launch, running
from servetune.engines.process import group_members
from servetune.errors import EngineError

SIM = EngineOptions(gpu="A100-80GB")


def test_sim_starts_serves_and_stops(tmp_path: Path) -> None:
    spec = build_command(
        "sim", "Qwen2.5-7B-Instruct", EngineKnobs(max_num_seqs=4), SIM, port=free_port()
    )
    with running(spec, tmp_path / "sim.log", ready_timeout_s=120) as eng:
        with urllib.request.urlopen(f"{eng.base_url}/models", timeout=10) as r:
            ids = [m["id"] for m in json.load(r)["data"]]
        assert ids == ["Qwen2.5-7B-Instruct"]
        with urllib.request.urlopen(f"{eng.spec.origin}/metrics", timeout=10) as r:
            assert "vllm:num_requests_running" in r.read().decode()
        pgid = eng.pgid
    assert group_members(pgid) == []


def test_sim_refusal_is_reported_with_its_reason(tmp_path: Path) -> None:
    # A 70B model's weights do not fit one A10G: the sim refuses as vLLM would, and exits.
    spec = build_command(
        "sim",
        "Llama-3.1-70B-Instruct",
        EngineKnobs(max_model_len=131072),
        EngineOptions(gpu="A10G"),
        port=free_port(),
    )
    with pytest.raises(EngineError) as info:
        asyncio.run(launch(spec, tmp_path / "sim.log", ready_timeout_s=120))
    assert "exited with status 2" in info.value.message
    assert "out of memory" in info.value.message
