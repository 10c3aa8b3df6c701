"""``servetune tune`` end to end on the simulated engine: it beats the default, writes its
files, says why when nothing meets the SLOs, refuses a space the planner rejects before
launching anything, and resumes a study losing no finished trial."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servetune.cli import main
from servetune.knobs import parse_command

BASE = ["tune", "--engine", "sim", "--num-prompts", "200", "--probes", "7", "--seed", "1"]
# H100: vLLM's default (1024 sequences, 8192 tokens, bf16 weights) against an FP8-weight
# option and smaller batches, under a tight TPOT SLO
SCENARIO = [
    "--gpu",
    "H100-80GB",
    "--slo",
    "ttft:p99<=300",
    "--slo",
    "tpot:p99<=30",
    "--knob",
    "quantization",
    "--knob",
    "max_num_seqs=64,256,1024",
]


def test_tune_beats_the_default_and_writes_everything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "t"
    code = main(
        [
            *BASE,
            *SCENARIO,
            "--trials",
            "8",
            "--repeats",
            "2",
            "--top-k",
            "2",
            "--result-dir",
            str(out),
        ]
    )
    text = capsys.readouterr().out
    assert code == 0, text
    r = json.loads((out / "tune.json").read_text())
    assert r["status"] == "complete"
    default = r["default"]
    best = r["best"]
    assert default["params"] == {"quantization": "default", "max_num_seqs": "default"}
    assert best["value"] > 1.1 * default["value"], (best, default)
    assert r["gain_over_default"] > 0.1
    parsed = parse_command(r["best_command"])
    assert parsed.engine == "vllm" and parsed.values == best["config"]
    assert {o["direction"] for o in r["ofat"]} >= {"best"}
    assert len(r["repeats"]) >= 2 and all(len(x["values"]) == 2 for x in r["repeats"])
    lines = (out / "trials.jsonl").read_text().splitlines()
    assert len(lines) == len(r["trials"])
    assert (out / "report.html").read_text().count("<svg") >= 1
    assert "command: vllm serve" in text and "one knob at a time" in text
    # progress through the repeats and the table, one line as each is measured
    assert "  repeated 1/" in text and "  1/" in text and " best: meets SLOs" in text


def test_the_gain_is_over_the_users_baseline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--baseline: what the user serves today is measured first, in the same study, whole
    (never pruned), repeated with the best; the gain and its noise verdict are over it."""
    out = tmp_path / "t"
    code = main(
        [
            *BASE,
            *SCENARIO,
            "--baseline",
            "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-num-seqs 8 --port 8000 "
            "--gpu-memory-utilization 0.85",
            "--trials",
            "4",
            "--repeats",
            "2",
            "--top-k",
            "1",
            "--no-ofat",
            "--result-dir",
            str(out),
        ]
    )
    text = capsys.readouterr().out
    assert code == 0, text
    r = json.loads((out / "tune.json").read_text())
    spec = r["spec"]
    assert spec["baseline"] == {"quantization": "default", "max_num_seqs": 8}
    assert 8 in spec["space"]["dims"][1]["values"]  # joined its dimension
    assert spec["space"]["fixed"] == {"gpu_memory_utilization": 0.85}  # kept for everyone
    base = r["baseline"]
    assert base["number"] == 0 and base["params"] == spec["baseline"]
    assert base["config"] == {"gpu_memory_utilization": 0.85, "max_num_seqs": 8}
    assert base["status"] == "ok" and base["value"] > 0
    assert all(t["config"]["gpu_memory_utilization"] == 0.85 for t in r["trials"])
    # 8 sequences on an H100 serves a fraction of what the search finds: beyond the noise
    assert r["gain_over_baseline"] > 0.5
    reps = {json.dumps(x["params"], sort_keys=True): x for x in r["repeats"]}
    assert json.dumps(base["params"], sort_keys=True) in reps and len(reps) == 2
    assert r["gain_beyond_noise"] is True
    assert "your baseline (gpu_memory_utilization=0.85, max_num_seqs=8) serves" in text
    assert "beyond the run-to-run spread" in text
    page = (out / "report.html").read_text()
    assert "over your baseline, both measured in this study" in page


def test_no_config_meets_the_slo_says_what_limits_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            *BASE,
            "--slo",
            "ttft:p99<=5",
            "--knob",
            "max_num_seqs=64,256",
            "--trials",
            "3",
            "--repeats",
            "1",
            "--result-dir",
            str(tmp_path / "t"),
        ]
    )
    out = capsys.readouterr().out
    assert code == 1
    assert "No configuration meets the SLOs" in out and "P99 TTFT ≤ 5 ms" in out
    r = json.loads((tmp_path / "t" / "tune.json").read_text())
    assert r["status"] == "no-config-meets" and r["best"] is None


def test_a_space_the_planner_rejects_is_said_before_any_launch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "tune",
            "--engine",
            "sim",
            "--gpu",
            "L4",
            "--model",
            "meta-llama/Llama-3.1-70B-Instruct",
            "--slo",
            "ttft:500",
            "--knob",
            "max_num_seqs=64,256",
            "--result-dir",
            str(tmp_path / "t"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "rejects every configuration" in err
    assert not (tmp_path / "t" / "trials.jsonl").exists()


def test_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "tune",
                "--engine",
                "llama.cpp",
                "--model",
                "m.gguf",
                "--slo",
                "ttft:500",
                "--knob",
                "gpu_memory_utilization=0.8,0.9",
            ]
        )
        == 2
    )
    assert "llama.cpp" in capsys.readouterr().err
    assert main(["tune", "--engine", "sim", "--trials", "2"]) == 2
    assert "needs at least one SLO" in capsys.readouterr().err
    assert main(["tune", "--base-url", "http://127.0.0.1:1/v1", "--slo", "ttft:500"]) == 2
    assert "cannot retune a server" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--objective", "goodput"], "the goodput objective needs at least one SLO (--slo)"),
        (["--slo", "ttft:500", "--time-budget", "0"], "--time-budget must be > 0 seconds"),
        (["--slo", "ttft:500", "--time-budget", "nan"], "--time-budget must be a finite number"),
        (["--slo", "ttft:500", "--mad-k", "nan"], "--mad-k must be a finite number"),
        (["--slo", "ttft:500", "--mad-k", "-1"], "--mad-k must be ≥ 0 (got -1)"),
        (["--slo", "ttft:500", "--ready-timeout", "nan"], "--ready-timeout must be a finite"),
    ],
)
def test_numbers_and_objectives_refused_before_any_trial(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], said: str
) -> None:
    """Each ran a whole search before: goodput without --slo scored every trial 0 (exit 1,
    "no configuration meets the SLOs"); a NaN --mad-k / --ready-timeout left a tune.json that
    could not be read back; --time-budget 0 ended "0 tried" with no reason."""
    out = tmp_path / "t"
    assert main([*BASE, "--trials", "1", "--result-dir", str(out), *flags]) == 2
    assert said in capsys.readouterr().err
    assert not (out / "trials.jsonl").exists()


def test_throughput_at_the_default_unbounded_rate_reads_its_own_trials(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--objective throughput at the default --request-rate (inf): the probe's rate was
    stored as JSON null and reading the trial back was a pydantic traceback."""
    out = tmp_path / "t"
    args = ["tune", "--engine", "sim", "--num-prompts", "20", "--seed", "1", "--trials", "1"]
    code = main([*args, "--objective", "throughput", "--repeats", "1", "--result-dir", str(out)])
    assert code == 0, capsys.readouterr().err
    trials = json.loads((out / "tune.json").read_text())["trials"]
    assert trials[0]["probes"][0]["rate"] == "inf"


def test_resume_keeps_every_finished_trial(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "t"
    args = [
        *BASE,
        "--slo",
        "ttft:p99<=1000",
        "--slo",
        "tpot:p99<=50",
        "--knob",
        "max_num_seqs=16,64,256,1024",
        "--repeats",
        "1",
        "--result-dir",
        str(out),
    ]
    assert main([*args, "--trials", "2"]) == 0
    first = json.loads((out / "tune.json").read_text())["trials"]
    assert main([*args, "--trials", "2"]) == 2  # the study exists: resume or not?
    assert "--resume" in capsys.readouterr().err
    assert main([*args, "--trials", "4", "--resume"]) == 0
    again = json.loads((out / "tune.json").read_text())["trials"]
    by_number = {t["number"]: t for t in again}
    for t in first:
        assert by_number[t["number"]]["value"] == t["value"]
    assert sum(1 for t in again if t["status"] in ("ok", "no-rate", "failed")) >= 4


def test_validate_top_remeasures_the_best_on_a_launched_engine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "t"
    code = main([
        "tune", "--engine", "sim", "--seed", "2", "--random-input-len", "128",
        "--random-output-len", "16", "--num-prompts", "60", "--probes", "4",
        "--slo", "ttft:p99<=500", "--knob", "max_num_seqs=64,256", "--trials", "2",
        "--repeats", "1", "--no-ofat", "--validate-top", "1", "--validate-engine", "sim",
        "--result-dir", str(out),
    ])  # fmt: skip
    assert code == 0, capsys.readouterr().out
    r = json.loads((out / "tune.json").read_text())
    (v,) = r["validation"]
    assert v["status"] == "ok" and v["measured"] > 0 and v["simulated"] > 0
    assert (out / "validate" / "01" / "engine.log").exists()
    assert "validated on the real engine" in capsys.readouterr().out


def test_a_run_or_sweep_folder_is_not_taken_over(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """tune --result-dir RUN_DIR wrote tune.json (and report.html) beside run.json, exit 0;
    `servetune report RUN_DIR` then showed the tune and the run was hidden."""
    for name in ("run.json", "sweep.json"):
        d = tmp_path / name
        d.mkdir()
        (d / name).write_text("{}")
        args = [*BASE, "--slo", "ttft:500", "--trials", "1", "--result-dir", str(d)]
        assert main(args) == 2
        assert f"({name}): a tune written there would hide it" in capsys.readouterr().err
        assert sorted(p.name for p in d.iterdir()) == [name]


def test_a_damaged_study_database_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """SQLAlchemy's multi-line text ([SQL: ...], a link) with a hint about PostgreSQL."""
    out = tmp_path / "t"
    out.mkdir()
    (out / "tune.db").write_text("garbage")
    args = [*BASE, "--slo", "ttft:500", "--trials", "1", "--result-dir", str(out), "--resume"]
    assert main(args) == 2
    err = capsys.readouterr().err
    line = next(x for x in err.splitlines() if x.startswith("servetune tune: error:"))
    assert "file is not a database" in line and "[SQL" not in err
    assert "looks damaged" in err and "postgresql" not in err
