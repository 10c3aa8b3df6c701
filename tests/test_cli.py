"""The ``servetune`` command line itself: every command is offered, help shows defaults
(never a secret), a bad flag is one clear line, errors are not tracebacks."""

from __future__ import annotations

from pathlib import Path

import pytest

from servetune.cli import COMMANDS, build_parser, main


def test_every_command_builds_its_parser(capsys: pytest.CaptureFixture[str]) -> None:
    build_parser()  # all at once, as `servetune --help` does
    for name, (_module, help_text) in COMMANDS.items():
        with pytest.raises(SystemExit) as done:
            main([name, "--help"])
        assert done.value.code == 0
        out = capsys.readouterr().out
        assert out.startswith(f"usage: servetune {name}") and help_text in out


@pytest.mark.parametrize(
    ("argv", "bad"),
    [
        (["bench", "--request-rate", "fast"], "argument --request-rate: not a rate: 'fast'"),
        (["sweep", "--num-prompts", "many"], "argument --num-prompts: invalid int value"),
        (["bench", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
        (["sim", "run", "--seed", "x"], "argument --seed: invalid int value"),
    ],
)
def test_a_bad_flag_is_one_line_not_the_usage(
    capsys: pytest.CaptureFixture[str], argv: list[str], bad: str
) -> None:
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 2, err
    assert lines[0].startswith("servetune ") and bad in lines[0]
    assert lines[1].strip().startswith("see: servetune ") and lines[1].endswith("--help")


def test_help_shows_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    out = " ".join(capsys.readouterr().out.split())  # undo the help's line wrapping
    assert "--random-input-len RANDOM_INPUT_LEN default: 1024" in out
    assert "(default: 512)" in out  # --prefix-len, after its own help text
    assert "(default: 0.0)" in out  # --random-range-ratio
    assert "(default: None)" not in out and "(default: False)" not in out
    # a help text that already speaks of its default is left alone
    assert out.count("default: the only one /v1/models lists") == 1


def test_help_never_shows_a_secret(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-do-not-print-me")
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    assert "sk-do-not-print-me" not in capsys.readouterr().out


def test_no_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in COMMANDS)


def test_running_out_of_memory_is_an_error_not_a_traceback(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`sim run --num-prompts 99999999999` was a numpy _ArrayMemoryError traceback (745 GiB
    asked for one array); any MemoryError ends as one error line and exit 2."""
    import servetune.sim.offline_plan as offline_plan

    def too_big(*_a: object, **_k: object) -> object:
        raise MemoryError("Unable to allocate 745. GiB")

    monkeypatch.setattr(offline_plan, "sample_lengths", too_big)
    code = main(
        [
            "sim",
            "run",
            "--num-prompts",
            "99999999999",
            "--no-progress",
            "--result-dir",
            str(tmp_path),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert err.startswith("servetune sim run: error: out of memory") and "--num-prompts" in err


@pytest.mark.parametrize("command", ["gateway", "rollout"])
def test_help_of_every_command_shows_no_empty_default(
    capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """gateway and rollout used argparse's own defaults formatter: "(default: None)",
    "(default: [])", and "--listen ... (default 127.0.0.1:8080) (default: None)"."""
    with pytest.raises(SystemExit):
        main([command, "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for empty in ("(default: None)", "(default: False)", "(default: [])"):
        assert empty not in out
    if command == "rollout":
        assert "(default: 5,25,50,100)" in out
