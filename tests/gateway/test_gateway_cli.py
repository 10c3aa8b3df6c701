"""The command line: keygen, hash-key, check, and clear errors instead of tracebacks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "servetune.cli", *args],
        capture_output=True, text=True, timeout=120, input=stdin,
    )  # fmt: skip


def test_keygen_hash_key_and_check(tmp_path: Path) -> None:
    r = cli("gateway", "keygen", "--tenant", "search")
    assert r.returncode == 0
    key = next(line.split()[1] for line in r.stdout.splitlines() if line.startswith("key:"))
    stored = next(line.split()[1] for line in r.stdout.splitlines() if line.startswith("stored:"))
    h = cli("gateway", "hash-key", stdin=key + "\n")
    assert h.returncode == 0 and h.stdout.strip() == stored
    cfg = tmp_path / "gateway.yaml"
    cfg.write_text(
        "groups:\n  - name: base\n    urls: [http://127.0.0.1:9/v1]\n    max_concurrency: 8\n"
        f"tenants:\n  - name: search\n    keys: [{stored}]\n    tpm: 1000\n"
    )
    c = cli("gateway", "check", "--config", str(cfg))
    assert c.returncode == 0, c.stderr
    assert "tenant search: standard" in c.stdout and "tpm 1000" in c.stdout
    assert "limits 8" in c.stdout and "1 slot(s) per upstream kept" in c.stdout
    assert key not in c.stdout + c.stderr  # the plain key is never printed back


def test_errors_are_messages_not_tracebacks(tmp_path: Path) -> None:
    r = cli("gateway")
    assert r.returncode == 2 and "no upstream" in r.stderr and "Traceback" not in r.stderr
    bad = tmp_path / "g.yaml"
    bad.write_text("groups:\n  - name: a\n    urls: [http://x]\n    max_concurency: 3\n")
    r = cli("gateway", "--config", str(bad))
    assert r.returncode == 2 and "unknown field" in r.stderr and "Traceback" not in r.stderr
    good = tmp_path / "ok.yaml"
    good.write_text("groups:\n  - name: a\n    urls: [http://127.0.0.1:9/v1]\n")
    r = cli("gateway", "--config", str(good), "--priority-headroom", "-1")
    assert r.returncode == 2 and "--priority-headroom -1" in r.stderr
    assert "Traceback" not in r.stderr
    r = cli("gateway", "hash-key", stdin="short\n")
    assert r.returncode == 2 and "at least" in r.stderr
    r = cli("rollout", "--gateway", "http://127.0.0.1:9", "--candidate", "c")
    assert r.returncode == 2 and "admin key" in r.stderr
    key_file = tmp_path / "admin.key"
    key_file.write_text("x" * 30)
    r = cli("rollout", "--gateway", "http://127.0.0.1:9", "--candidate", "c", "--steps", "50,10",
            "--admin-key-file", str(key_file))  # fmt: skip
    assert r.returncode == 2 and "steps must rise" in r.stderr
