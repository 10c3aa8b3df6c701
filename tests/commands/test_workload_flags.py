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
