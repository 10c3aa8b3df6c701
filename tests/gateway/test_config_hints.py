"""Every way a gateway's configuration or key file can be wrong says what to do: the message
names the file and the problem, the hint the fix (`servetune gateway check`, `--api-key-file`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from tests.conftest import run_cli


def _check(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli("gateway", *args, timeout=120)


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (None, "no such file"),
        ("folder", "cannot be read"),
        ("groups: [\n", "not valid YAML"),
        ("- a\n- b\n", "the top level must be a mapping"),
        ("", "the file is empty"),
    ],
)
def test_gateway_check_says_what_is_wrong_and_what_to_do(
    tmp_path: Path, content: str | None, words: str
) -> None:
    cfg = tmp_path / "gateway.yaml"
    if content == "folder":
        cfg.mkdir()
    elif content is not None:
        cfg.write_text(content)
    r = _check("check", "--config", str(cfg))
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert words in r.stderr and "hint:" in r.stderr and "Traceback" not in r.stderr, r.stderr


@pytest.mark.parametrize("kind", ["missing", "folder", "fields"])
def test_an_api_key_file_that_cannot_be_used_says_what_to_do(tmp_path: Path, kind: str) -> None:
    keys = tmp_path / "keys.txt"
    if kind == "folder":
        keys.mkdir()
    elif kind == "fields":
        keys.write_text("sk-abcdefghijklmnopqrstuvwxyz0123 tenant extra\n")
    cfg = tmp_path / "gateway.yaml"
    cfg.write_text(
        f"groups:\n  - name: g\n    urls: [http://127.0.0.1:9/v1]\nkey_files: [{keys}]\n"
    )
    r = _check("check", "--config", str(cfg))
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "API key file" in r.stderr or "keys.txt" in r.stderr, r.stderr
    assert "hint:" in r.stderr and "Traceback" not in r.stderr, r.stderr
