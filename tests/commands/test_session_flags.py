"""The session and trace flags as a user gives them: sim run and sweep take them; a bad value
or a malformed trace line is one clear error and exit 2, before anything runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servetune.cli import main

DATA = Path(__file__).parents[1] / "data" / "workloads"


def test_sim_run_of_sessions_reports_turns_and_the_cache(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "run"
    code = main(
        [
            "sim", "run", "--dataset-name", "multiturn", "--multiturn-turns", "2:4",
            "--multiturn-system-len", "256", "--multiturn-system-prompts", "2",
            "--multiturn-think-time", "0.5", "--random-input-len", "64",
            "--random-output-len", "32", "--num-prompts", "10", "--request-rate", "2",
            "--result-dir", str(out),
        ]
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    run = json.loads((out / "run.json").read_text())
    assert run["config"]["multiturn"]["turns_min"] == 2
    assert run["config"]["multiturn"]["turns_max"] == 4
    assert run["summary"]["sessions"]["sessions"] == 10
    assert run["summary"]["cache"]["hit_rate"] > 0.5
    lines = (out / "requests.jsonl").read_text().splitlines()
    assert all(json.loads(x)["session"] for x in lines)


def test_sweep_replays_a_trace_at_each_rate(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "sweep"
    code = main(
        [
            "sweep", "--sim-offline", "--dataset-name", "trace", "--dataset-path",
            str(DATA / "azure_excerpt.csv"), "--request-rates", "1,4", "--result-dir", str(out),
        ]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 0, err
    sweep = json.loads((out / "sweep.json").read_text())
    assert len(sweep["rows"]) == 2 and all(r["completed"] == 5 for r in sweep["rows"])


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--dataset-name", "multiturn", "--multiturn-turns", "5:2"], "below the least"),
        (["--dataset-name", "multiturn", "--multiturn-turns", "x"], "not a number of turns"),
        (["--dataset-name", "multiturn", "--multiturn-turns", "0"], "--multiturn-turns"),
        (["--dataset-name", "multiturn", "--multiturn-think-time", "-1"], "--multiturn-think-time"),
        (["--dataset-name", "multiturn", "--multiturn-think-time", "nan"], "finite number"),
        (["--dataset-name", "multiturn", "--session-header", "a b"], "not an HTTP header name"),
        (["--dataset-name", "multiturn", "--multiturn-max-context", "1"], "max-context"),
        (["--dataset-name", "trace"], "needs --dataset-path"),
        (["--dataset-name", "trace", "--dataset-path", "nope.jsonl"], "trace file not found"),
        (["--trace-window", "9:3"], "is empty"),
        (["--trace-window", "abc"], "not a window"),
        (["--trace-time-scale", "0"], "--trace-time-scale"),
    ],
)
def test_bad_session_and_trace_flags(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, flags: list[str], said: str
) -> None:
    out = tmp_path / "out"
    try:
        code = main(["sim", "run", "--num-prompts", "3", "--result-dir", str(out), *flags])
    except SystemExit as exc:  # argparse's own refusal of a value it cannot parse
        code = int(exc.code or 0)
    err = capsys.readouterr().err
    assert code == 2, err
    assert said in err and "Traceback" not in err
    assert not (out / "run.json").exists()


def test_a_malformed_trace_line_names_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = tmp_path / "t.jsonl"
    bad.write_text(
        '{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1]}\n'
        '{"timestamp": 10, "input_length": 10, "output_length": -2, "hash_ids": [1]}\n'
    )
    code = main(
        ["sim", "run", "--dataset-name", "trace", "--dataset-path", str(bad), "--result-dir",
         str(tmp_path / "o")]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    assert f"{bad}:2: 'output_length' must be ≥ 1, got -2" in err


def test_a_session_rate_ladder_says_sessions(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "sweep"
    code = main(
        [
            "sweep", "--sim-offline", "--dataset-name", "multiturn", "--multiturn-turns", "3",
            "--random-input-len", "64", "--random-output-len", "32", "--num-prompts", "20",
            "--request-rates", "1,2", "--goodput", "ttft:10000", "--result-dir", str(out),
        ]
    )  # fmt: skip
    said = capsys.readouterr().out
    assert code == 0
    assert "sess/s" in said
    sweep = json.loads((out / "sweep.json").read_text())
    assert "2 sessions/s" in sweep["slo_max"]["verdict"], sweep["slo_max"]["verdict"]


def test_compare_and_tune_take_sessions_unchanged(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    flags = [
        "--dataset-name", "multiturn", "--multiturn-turns", "3:5", "--multiturn-system-len",
        "256", "--random-input-len", "64", "--random-output-len", "48", "--num-prompts", "30",
    ]  # fmt: skip
    for seed in ("1", "2"):
        assert main(["sim", "run", *flags, "--request-rate", "3", "--seed", seed,
                     "--result-dir", str(tmp_path / seed)]) == 0  # fmt: skip
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "1"), str(tmp_path / "2")]) == 0
    assert "verdict:" in capsys.readouterr().out
    code = main(
        ["tune", "--engine", "sim", *flags, "--slo", "ttft:p99<=2000", "--trials", "2",
         "--probes", "3", "--result-dir", str(tmp_path / "tune")]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    # the prefix cache is what this workload is about: turning it off costs the most
    assert "enable_prefix_caching=False" in out
    assert (tmp_path / "tune" / "tune.json").exists()
