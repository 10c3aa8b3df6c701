"""scripts/ci-system-deps.sh: quick when all is there; installs as root; without root or sudo
it says what to install and lets the tests skip — except under CI=true, where it fails."""

from __future__ import annotations

import os
import stat
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "ci-system-deps.sh"
PKG = "servetune-test-pkg"


def _tool(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def sandbox(tmp_path: Path) -> Path:
    """A copy of the script asking for one made-up package, and stand-ins for the system's
    tools first on PATH (dpkg-query says what is installed, apt-get logs its calls)."""
    text = SCRIPT.read_text()
    start = text.index("PACKAGES=(")
    end = text.index("\n)", start) + 1  # the line that closes the list (comments hold parens)
    (tmp_path / "deps.sh").write_text(text[:start] + f"PACKAGES=(\n  {PKG}\n" + text[end:])
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "apt.log"
    installed = tmp_path / "installed"
    _tool(bin_dir, "dpkg-query", f'[ -e "{installed}" ] && printf "install ok installed"; :')
    _tool(
        bin_dir,
        "apt-get",
        f'echo "$@" >> "{log}"; case "$*" in *install*) : > "{installed}";; esac',
    )
    _tool(bin_dir, "sudo", "exit 1")  # no passwordless sudo
    return tmp_path


def _run(box: Path, uid: int, ci: str | None) -> subprocess.CompletedProcess[str]:
    _tool(box / "bin", "id", f"echo {uid}")
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PATH"] = f"{box / 'bin'}:{env['PATH']}"
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        ["bash", str(box / "deps.sh")], capture_output=True, text=True, env=env, timeout=60
    )


def test_nothing_to_do_is_quick_and_quiet(sandbox: Path) -> None:
    (sandbox / "installed").touch()
    t = time.perf_counter()
    done = _run(sandbox, 1000, "true")
    assert done.returncode == 0 and done.stderr == ""
    assert time.perf_counter() - t < 5
    assert not (sandbox / "apt.log").exists()


def test_root_installs_what_is_missing_once(sandbox: Path) -> None:
    done = _run(sandbox, 0, None)
    assert done.returncode == 0, done.stderr
    calls = (sandbox / "apt.log").read_text().splitlines()
    assert any("update" in c for c in calls)
    assert any("install" in c and PKG in c and "-y" in c for c in calls)
    again = _run(sandbox, 0, None)
    assert again.returncode == 0 and (sandbox / "apt.log").read_text().splitlines() == calls


def test_without_root_or_sudo_it_says_what_to_do_and_lets_tests_skip(sandbox: Path) -> None:
    done = _run(sandbox, 1000, None)
    assert done.returncode == 0
    assert f"cannot install {PKG}: not root, and no passwordless sudo" in done.stderr
    assert f"sudo apt-get install {PKG}" in done.stderr and "skip" in done.stderr
    assert not (sandbox / "apt.log").exists()


def test_under_ci_a_missing_package_fails_the_set_up(sandbox: Path) -> None:
    done = _run(sandbox, 1000, "true")
    assert done.returncode == 1
    assert "CI=true" in done.stderr
