"""diagnose reads the server command line a sweep recorded (``sweep --server-cmd``): the knob
values a real server was started with, for the sweep and for each of its levels; one given on
the command line wins; one that is not an engine's is said, not fatal."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from servetune.cli import main
from servetune.diagnose import diagnose_path
from servetune.results.schema import BenchConfig
from servetune.results.sweep_schema import SweepConfig
from servetune.sweep.runner import run_sweep
from servetune.sweep.synthetic import SyntheticEngine

VLLM = "vllm serve Qwen/Qwen2.5-7B-Instruct --max-num-seqs 48 --port 8000"


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("recorded") / "sweep"
    cfg = SweepConfig(bench=BenchConfig(num_prompts=60), mode="rate", request_rates=[2.0, 32.0])
    run_sweep(cfg, d, SyntheticEngine(), echo=lambda _m: None)
    return d


def _record(sweep: Path, server_cmd: str | None) -> None:
    data = orjson.loads((sweep / "sweep.json").read_bytes())
    data["config"]["server_cmd"] = server_cmd
    (sweep / "sweep.json").write_bytes(orjson.dumps(data))


def test_nothing_recorded_nothing_known(sweep: Path) -> None:
    _record(sweep, None)
    assert diagnose_path(sweep).knobs == {}


@pytest.mark.parametrize("level", [None, "rate-32"])
def test_the_recorded_command_line_gives_the_knobs(sweep: Path, level: str | None) -> None:
    _record(sweep, VLLM)
    diag = diagnose_path(sweep / "levels" / level if level else sweep)
    assert diag.knobs.get("max_num_seqs") == 48
    assert any(VLLM in n and "recorded in" in n for n in diag.notes), diag.notes


def test_a_command_line_given_wins(sweep: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _record(sweep, VLLM)
    given = "vllm serve Qwen/Qwen2.5-7B-Instruct --max-num-seqs 7"
    level = sweep / "levels" / "rate-32"
    assert diagnose_path(level, server_cmd=given).knobs.get("max_num_seqs") == 7
    assert main(["diagnose", str(level), "--server-cmd", given, "--json"]) == 0
    assert orjson.loads(capsys.readouterr().out)["knobs"]["max_num_seqs"] == 7
    # the flag's earlier name still reads
    assert main(["diagnose", str(level), "--config", given, "--json"]) == 0
    assert orjson.loads(capsys.readouterr().out)["knobs"]["max_num_seqs"] == 7


def test_a_recorded_script_is_said_not_fatal(sweep: Path) -> None:
    _record(sweep, "./start-my-server.sh --port 8000")
    diag = diagnose_path(sweep / "levels" / "rate-32")
    assert diag.knobs == {}
    assert any("./start-my-server.sh" in n and "--server-cmd" in n for n in diag.notes)
