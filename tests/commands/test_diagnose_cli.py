"""``servetune diagnose``: text for a person, JSON for machines, clear errors."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from servetune.cli import main
from servetune.diagnose import Diagnosis

ScenarioDir = Callable[[str], Path]


def test_text_is_short_and_ranked(
    scenario_dir: ScenarioDir, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["diagnose", str(scenario_dir("kv_pool_full"))]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[1].startswith("▶ The KV pool is full")
    assert "1. [bottleneck · confidence high] The KV pool is full" in out
    assert "a. [cost order 1 quantize] quantize the KV cache: --kv-cache-dtype fp8" in out
    assert "llama.cpp -ctk q8_0 -ctv q8_0" in out
    assert "(--verbose)" in out
    assert "Change one knob at a time" in out
    assert len(lines) < 60


def test_verbose_shows_every_condition_and_engine(
    scenario_dir: ScenarioDir, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["diagnose", str(scenario_dir("kv_pool_full")), "-v"]) == 0
    out = capsys.readouterr().out
    assert "✓ KV-cache use > 90%" in out
    assert "SGLang: --kv-cache-dtype fp8_e5m2" in out
    assert "only then add GPUs" in out


def test_json_is_the_diagnosis_model(
    scenario_dir: ScenarioDir, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["diagnose", str(scenario_dir("batch_capped")), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    diag = Diagnosis.model_validate(data)
    assert diag.kind == "run"
    assert diag.findings[0].rule == "batch_capped"
    action = diag.findings[0].actions[0]
    assert (action.knob, action.from_value, action.to_value) == ("max_num_seqs", 16, 32)
    assert data["figures"]["running_at_cap_share"] > 0.5
    assert "gpu_utilization_mean" in data["missing"]


def test_the_config_doctor_from_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "diagnose",
            "--server-cmd",
            "vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len 8192 --gpu-memory-utilization 0.3",
            "--gpu",
            "A100-80GB",
            "--workload-input-len",
            "2048",
            "--workload-output-len",
            "512",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert out.startswith("servetune diagnose — config (before launch)")
    assert "▶ Preemption ahead" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["diagnose"], "nothing to diagnose"),
        (["diagnose", "--server-cmd", "vllm serve m"], "needs the GPU"),
        (["diagnose", "/nonexistent/run"], "does not exist"),
        (
            ["diagnose", "--server-cmd", "vllm serve Qwen2.5-7B-Instruct", "--gpu", "B300-9000"],
            "unknown gpu",
        ),
        (  # a negative length was taken as given: advice for a 5-token workload
            [
                "diagnose",
                "--server-cmd",
                "vllm serve Qwen2.5-7B-Instruct",
                "--gpu",
                "A100-80GB",
                "--workload-input-len",
                "-5",
                "--workload-output-len",
                "10",
            ],
            "--workload-input-len must be ≥ 1 token (got -5)",
        ),
    ],
)
def test_user_errors_are_two_lines_and_status_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_the_installed_command_runs(scenario_dir: ScenarioDir) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "servetune.cli", "diagnose", str(scenario_dir("healthy"))],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "▶ Healthy" in proc.stdout


def test_the_rules_table_is_printable_data(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagnose", "--rules", "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    ids = {r["id"] for r in table}
    assert {"under_loaded", "kv_pool_full", "prefill_blocked", "overloaded"} <= ids
    assert "will_not_start" not in ids  # the refusal is the memory planner's own verdict
    assert {"pool_below_batch", "max_model_len_oversized", "prompts_exceed_batch"} <= ids
    kv = next(r for r in table if r["id"] == "kv_pool_full")
    assert kv["needs"] and kv["actions"][0]["knob"] == "kv_cache_dtype"
    assert main(["diagnose", "--rules"]) == 0
    assert "kv_pool_full (run, bottleneck)" in capsys.readouterr().out
