"""Bad input found by probing every command (0, negative, NaN, inf, a wrong file, flags that
contradict each other): each is one clear error and exit 2 — never a traceback, never a value
silently clamped or dropped while the command exits as if it had done what was asked."""

from __future__ import annotations

from pathlib import Path

import pytest

from servetune.cli import main


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bad-input") / "run"
    assert (
        main(["sim", "run", "--num-prompts", "5", "--no-progress", "--result-dir", str(out)]) == 0
    )
    return out


def _refused(capsys: pytest.CaptureFixture[str], args: list[str], said: str) -> str:
    code = main(args)
    err = capsys.readouterr().err
    assert code == 2, err
    assert said in err and "hint:" in err and "Traceback" not in err
    return err


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"[1, 2]", "is not a model config: expected a JSON object"),  # AttributeError
        (b"\xff\xfe{}", "cannot read model config"),  # UnicodeDecodeError
    ],
)
def test_sim_model_config_that_is_no_config(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: bytes, said: str
) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_bytes(content)
    _refused(capsys, ["sim", "plan", "--model", str(cfg)], said)


@pytest.mark.parametrize("flag", ["--texts", "--samples"])
def test_quality_binary_file(capsys: pytest.CaptureFixture[str], tmp_path: Path, flag: str) -> None:
    """A UnicodeDecodeError traceback; said before any endpoint is asked."""
    f = tmp_path / "data.jsonl"
    f.write_bytes(b"\xff\xfe\x00garbage\n")
    url = "http://127.0.0.1:9/v1"
    args = ["quality", "--baseline", url, "--candidate", url, "--out", str(tmp_path / "q")]
    _refused(capsys, [*args, flag, str(f)], f"{flag} {f} is not UTF-8 text")


SWEEP = ["sweep", "--sim-offline", "--num-prompts", "5", "--no-progress", "--no-report"]


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        # ran the default levels 8..128 and exited 0
        (["--request-rates", ""], "--request-rates is empty"),
        # taken as given: no server started by --server-cmd could ever be ready
        (["--server-ready-timeout", "0"], "--server-ready-timeout must be > 0 seconds"),
        (["--server-ready-timeout", "nan"], "--server-ready-timeout must be > 0 seconds"),
    ],
)
def test_sweep_levels_and_timeouts(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, flags: list[str], said: str
) -> None:
    out = tmp_path / "s"
    _refused(capsys, [*SWEEP, "--result-dir", str(out), *flags], said)
    assert not out.exists()


@pytest.mark.parametrize(
    ("command", "said"),
    [
        (["diagnose", "{run}", "--gpu", "NOPE"], "unknown gpu 'NOPE'"),
        (["diagnose", "{run}", "--model", "nope/none"], "unknown model 'nope/none'"),
        (["export", "prometheus-rules", "--gpu", "NOPE"], "unknown gpu 'NOPE'"),
        (["export", "grafana", "--model", "nope/none"], "unknown model 'nope/none'"),
        (["watch", "http://127.0.0.1:9", "--gpu", "NOPE", "--json"], "unknown gpu 'NOPE'"),
    ],
)
def test_unknown_gpu_or_model_for_the_compute_estimate(
    capsys: pytest.CaptureFixture[str], run_dir: Path, command: list[str], said: str
) -> None:
    """The estimate the flag was given for went missing, exit 0 (watch: the URL was tried)."""
    _refused(capsys, [a.replace("{run}", str(run_dir)) for a in command], said)


@pytest.mark.parametrize(
    ("command", "flags", "said"),
    [
        # sent as is: every request a 400 from a real server
        (
            ["bench", "--base-url", "http://127.0.0.1:9/v1"],
            ["--temperature", "-1"],
            "--temperature must be ≥ 0",
        ),
        # the gaps were all 1/rate: --burstiness dropped without a word
        (
            ["sim", "run"],
            ["--arrival", "constant", "--burstiness", "0.5"],
            "--burstiness 0.5 shapes random gaps",
        ),
        # inf: a ValueError traceback (NaN gaps)
        (
            ["plan", "--slo", "ttft:2000", "--rate", "1"],
            ["--burstiness", "inf"],
            "--burstiness must be a finite number > 0",
        ),
    ],
)
def test_arrival_and_sampling_flags(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    command: list[str],
    flags: list[str],
    said: str,
) -> None:
    out = tmp_path / "o"
    if command[0] == "plan":
        where = ["-o", str(out)]
    else:
        where = ["--num-prompts", "5", "--result-dir", str(out)]
    _refused(capsys, [*command, *where, *flags], said)
    assert not out.exists()


@pytest.mark.parametrize("command", [["bench"], ["sweep", "--sim-offline"], ["watch", "h:1"]])
def test_dcgm_url_that_is_not_http(capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    """Taken, failed at every scrape ('GPU metrics unavailable'), and the run exited 0."""
    with pytest.raises(SystemExit) as exc:
        main([*command, "--dcgm-url", "ftp://127.0.0.1:9400/metrics"])
    assert exc.value.code == 2
    assert "--dcgm-url: 'ftp://127.0.0.1:9400/metrics' is not an http(s) URL" in (
        capsys.readouterr().err
    )


def test_sim_run_that_measured_nothing_says_why(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Exit 1 with "0 completed, 0 failed" and no reason on the screen (it was in run.json)."""
    out = tmp_path / "r"
    args = ["sim", "run", "--num-prompts", "5", "--no-progress", "--result-dir", str(out)]
    assert main([*args, "--warmup", "1e6"]) == 1
    assert "failed: no request falls in the measured window" in capsys.readouterr().out


TUNE = ["tune", "--engine", "sim", "--slo", "ttft:500", "--trials", "1", "--num-prompts", "5"]


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        # each was clamped without a word and the study ran other than asked
        (["--probes", "-1"], "--probes must be ≥ 2 (got -1)"),
        (["--repeats", "0"], "--repeats must be ≥ 1 (got 0)"),
        (["--top-k", "0"], "--top-k must be ≥ 1 (got 0)"),
        (["--heartbeat", "0"], "--heartbeat must be ≥ 1 (got 0)"),
    ],
)
def test_tune_counts_are_not_clamped(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, flags: list[str], said: str
) -> None:
    out = tmp_path / "t"
    _refused(capsys, [*TUNE, "--result-dir", str(out), *flags], said)
    assert not out.exists()


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--trials", "0"], "--trials must be ≥ 1 (got 0)"),
        (["--heartbeat", "-1"], "--heartbeat must be ≥ 1 (got -1)"),
    ],
)
def test_tune_worker_counts(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, flags: list[str], said: str
) -> None:
    storage = f"sqlite:///{tmp_path / 'w.db'}"
    _refused(capsys, ["tune", "worker", "--study", "x", "--storage", storage, *flags], said)
