"""`servetune sim run` keeps what is already on disk: an earlier run in --result-dir is
replaced only with --overwrite (as bench does), and a sweep's folder is never written into."""

from __future__ import annotations

from pathlib import Path

import pytest

from servetune.cli import main
from servetune.results.io import read_records

SMALL = ["--num-prompts", "5", "--no-progress"]


def test_an_earlier_run_is_replaced_only_with_overwrite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It was replaced silently (100 records became 5, exit 0)."""
    assert main(["sim", "run", *SMALL, "--num-prompts", "7", "--result-dir", str(tmp_path)]) == 0
    capsys.readouterr()
    assert main(["sim", "run", *SMALL, "--result-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "already holds a run" in err and "--overwrite" in err
    assert len(read_records(tmp_path)) == 7
    assert main(["sim", "run", *SMALL, "--result-dir", str(tmp_path), "--overwrite"]) == 0
    assert len(read_records(tmp_path)) == 5


def test_a_sweep_folder_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sweep = tmp_path / "sweep"
    assert main(["sweep", "--sim-offline", "--request-rates", "2", *SMALL, "--no-report",
                 "--result-dir", str(sweep)]) == 0  # fmt: skip
    before = sorted(p.name for p in sweep.iterdir())
    capsys.readouterr()
    for flags in ([], ["--overwrite"]):
        assert main(["sim", "run", *SMALL, "--result-dir", str(sweep), *flags]) == 2
        assert "holds a sweep (sweep.json)" in capsys.readouterr().err
    assert sorted(p.name for p in sweep.iterdir()) == before
