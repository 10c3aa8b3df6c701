"""The load flags shared by bench, sweep, sim run and tune: a number that is no number (NaN),
an endless one where an end is needed, or a negative seed is one clear line and exit 2, before
anything runs — never a traceback, never a flag silently dropped."""

from __future__ import annotations

from pathlib import Path

import pytest

from servetune.cli import main


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--duration", "nan"], "--duration must be a finite number (got nan)"),
        (["--duration", "inf"], "--duration must be a finite number (got inf)"),
        (["--warmup", "nan"], "--warmup must be a finite number"),
        (["--cooldown", "inf"], "--cooldown must be a finite number"),
        (["--random-range-ratio", "nan"], "--random-range-ratio must be a finite number"),
        (["--burstiness", "inf"], "--burstiness must be a finite number"),
        (["--goodput", "ttft:nan"], "the SLO must be > 0 ms"),
        (["--seed", "-1"], "--seed must be ≥ 0 (got -1)"),
        # the measured window would be empty
        (["--duration", "5", "--warmup", "5"], "leave nothing of --duration 5 s to measure"),
        # a file nobody reads: the run sent random prompts instead, exit 0
        (["--dataset-path", "d.jsonl"], "--dataset-path d.jsonl is not read by --dataset-name"),
    ],
)
@pytest.mark.parametrize("command", [["sim", "run"], ["sweep", "--sim-offline"]])
def test_non_numbers_are_refused_up_front(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    command: list[str],
    flags: list[str],
    said: str,
) -> None:
    """Each of these was a pydantic or numpy traceback (NaN warm-up, range ratio; a negative
    seed) or was silently ignored (--duration nan ran without a duration)."""
    out = tmp_path / "out"
    code = main([*command, "--num-prompts", "5", "--result-dir", str(out), *flags])
    err = capsys.readouterr().err
    assert code == 2, err
    assert said in err and "Traceback" not in err
    assert not (out / "run.json").exists() and not (out / "sweep.json").exists()


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        # every request "timed out after -1 s" (exit 1) / the scraper's ValueError traceback
        (["--request-timeout", "0"], "--request-timeout must be > 0 seconds"),
        (["--request-timeout", "-1"], "--request-timeout must be > 0 seconds"),
        (["--metrics-interval", "0"], "--metrics-interval must be > 0 seconds"),
        (["--metrics-interval", "nan"], "--metrics-interval must be > 0 seconds"),
    ],
)
def test_client_timings_that_cannot_work(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, flags: list[str], said: str
) -> None:
    out = tmp_path / "out"
    code = main(["sweep", "--sim-offline", "--num-prompts", "5", "--result-dir", str(out), *flags])
    assert code == 2 and said in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("command", [["bench"], ["sweep", "--request-rates", "4"]])
def test_engine_flags_with_a_base_url_are_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: list[str]
) -> None:
    """--max-num-seqs / --gpu with --base-url configure nothing (the server is running);
    they were ignored without a word and the run exited 0."""
    args = [*command, "--base-url", "http://127.0.0.1:9/v1", "--result-dir", str(tmp_path / "o")]
    assert main([*args, "--max-num-seqs", "8", "--gpu", "H100-SXM"]) == 2
    err = capsys.readouterr().err
    assert "--gpu, --max-num-seqs: these configure the simulated engine" in err
    assert "hint:" in err


def test_bench_says_a_bad_flag_before_probing_the_server(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The server was probed first: a dead URL was reported (or a hanging one waited for,
    15 s) before the flag that could never work."""
    out = tmp_path / "o"
    args = ["bench", "--base-url", "http://127.0.0.1:9/v1", "--result-dir", str(out)]
    assert main([*args, "--request-rate", "-1"]) == 2
    err = capsys.readouterr().err
    assert "--request-rate must be > 0" in err and "cannot reach" not in err
    assert not out.exists()
