"""`servetune engine cmd|start|stop` without a real engine: what it prints and refuses."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from servetune.cli import main

FAKE_ENGINE = Path(__file__).resolve().parents[1] / "engines" / "fake_engine.py"


def test_cmd_prints_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "engine",
            "cmd",
            "llama.cpp",
            "--model",
            "m.gguf",
            "--max-num-seqs",
            "2",
            "--max-model-len",
            "512",
            "--executable",
            "/bin/llama-server",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out.strip()
    assert out == (
        "/bin/llama-server -m m.gguf --host 127.0.0.1 --port 8000 -a m.gguf --metrics "
        "-np 2 -c 1024 -t 1"
    )


def test_cmd_vllm_with_engine_args(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "engine",
            "cmd",
            "vllm",
            "--model",
            "org/m",
            "--port",
            "9000",
            "--no-enable-chunked-prefill",
            "--engine-arg=--seed",
            "--engine-arg=1",
        ]
    )
    assert code == 0
    assert capsys.readouterr().out.strip() == (
        "vllm serve org/m --host 127.0.0.1 --port 9000 --served-model-name org/m "
        "--no-enable-chunked-prefill --seed 1"
    )


def test_cmd_passes_the_long_prefill_cap_to_vllm(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["engine", "cmd", "vllm", "--model", "m", "--long-prefill-token-threshold", "512"]
    assert main(argv) == 0
    assert capsys.readouterr().out.split()[-2:] == ["--long-prefill-token-threshold", "512"]


def test_knob_the_engine_lacks_is_a_two_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["engine", "cmd", "llama.cpp", "--model", "m.gguf", "--quantization", "awq"])
    assert code == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "servetune engine cmd: error: engine llama.cpp has no knob quantization"
    assert err[1].startswith("  hint: ") and "GGUF" in err[1]


def test_invalid_value_is_a_two_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["engine", "cmd", "vllm", "--model", "m", "--gpu-memory-utilization", "1.5"])
    assert code == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "servetune engine cmd: error: gpu_memory_utilization = 1.5: expected ≤ 1"
    assert err[1].startswith("  hint: ") and len(err) == 2


def test_stop_unknown_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SERVETUNE_STATE_DIR", str(tmp_path))
    code = main(["engine", "stop", "nothing"])
    assert code == 2
    assert "no engine named 'nothing'" in capsys.readouterr().err


def test_start_and_stop_a_stand_in_engine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """start returns once it serves, leaving it running; stop ends its process group."""
    from servetune.engines.process import group_members

    fake = tmp_path / "llama-server"
    fake.write_text(
        f"#!{sys.executable}\n"
        "import sys, runpy\n"
        "a = sys.argv\n"
        f"sys.argv = [{str(FAKE_ENGINE)!r}, 'serve',\n"
        "            a[a.index('--port') + 1], a[a.index('-a') + 1]]\n"
        "runpy.run_path(sys.argv[0], run_name='__main__')\n"
    )
    fake.chmod(0o755)
    state = tmp_path / "state"
    monkeypatch.setenv("SERVETUNE_STATE_DIR", str(state))
    code = main(
        [
            "engine",
            "start",
            "llama.cpp",
            "--model",
            "x.gguf",
            "--executable",
            str(fake),
            "--ready-timeout",
            "30",
        ]
    )
    assert code == 0
    record = json.loads((state / "llama.cpp.json").read_text())
    try:
        assert "ready: http://127.0.0.1:" in capsys.readouterr().out
        assert group_members(record["pgid"])
    finally:
        assert main(["engine", "stop", "llama.cpp"]) == 0
    assert "stopped llama.cpp" in capsys.readouterr().out
    assert group_members(record["pgid"]) == []
    assert main(["engine", "stop", "llama.cpp"]) == 2


@pytest.mark.parametrize("port", ["99999", "0", "-1"])
def test_a_port_that_is_no_port_is_refused(port: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`engine cmd vllm --port 99999` printed a command line with that port, exit 0."""
    assert main(["engine", "cmd", "vllm", "--model", "m", "--port", port]) == 2
    assert f"--port {port} is not a port" in capsys.readouterr().err
