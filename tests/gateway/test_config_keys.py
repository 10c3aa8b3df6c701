"""Configuration (YAML, flags), hashed keys, peak hours, the audit log, the quality gate."""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from servetune.errors import ConfigError
from servetune.gateway.audit import AuditLog, read_audit
from servetune.gateway.config import config_from_flags, load_config
from servetune.gateway.keys import KeyRing, hash_key, new_key, parse_hashed, read_key_file
from servetune.gateway.peak import PeakHours
from servetune.gateway.quality_gate import read_file, run_command
from servetune.gateway.rollout import parse_steps, rollback_weights, step_weights


def write(tmp: Path, text: str) -> Path:
    p = tmp / "gateway.yaml"
    p.write_text(text)
    return p


def test_yaml_config_with_tenants_and_defaults(tmp_path: Path) -> None:
    key = hash_key(new_key())
    cfg = load_config(
        write(
            tmp_path,
            f"""
listen: 127.0.0.1:0
groups:
  - name: baseline
    urls: [http://127.0.0.1:8000]
    max_concurrency: 8
  - name: candidate
    urls: [http://127.0.0.1:8001/v1/]
    weight: 0
defaults: {{max_tokens: 512, rpm: 60}}
tenants:
  - name: search
    keys: [{key}]
    weight: 2
    priority: interactive
    tpm: 10000
audit_log: logs/audit.jsonl
""",
        )
    )
    assert cfg.groups[0].urls == ["http://127.0.0.1:8000/v1"]
    assert cfg.groups[1].urls == ["http://127.0.0.1:8001/v1"]
    lim = cfg.limits_of(cfg.tenants[0])
    assert (lim.max_tokens, lim.rpm, lim.tpm) == (512, 60, 10000)
    assert cfg.audit_log == str(tmp_path / "logs/audit.jsonl")
    assert cfg.queue.priority_headroom == 1  # the default: one slot kept for a higher class
    assert config_from_flags(["http://x"], priority_headroom=0).queue.priority_headroom == 0


def test_priority_headroom_reaches_every_pool_and_survives_a_reload(tmp_path: Path) -> None:
    from servetune.gateway.app import Gateway

    text = "groups:\n  - name: a\n    urls: [http://127.0.0.1:9]\n    max_concurrency: 4\n"
    path = write(tmp_path, text + "queue: {priority_headroom: 2}\n")
    gw = Gateway(load_config(path), str(path))
    pool = gw.pools["a"]
    assert pool.headroom == 2 and pool.running == [0, 0, 0]
    pool.running[0] = 1  # an interactive request in flight when the file is re-read
    gw._apply(load_config(write(tmp_path, text)))
    assert gw.pools["a"].headroom == 1 and gw.pools["a"].running is pool.running


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("groups: []", "groups"),
        ("groups:\n  - name: a\n    urls: [ftp://x]", "not an http(s) URL"),
        # a port out of range or not a number was a ValueError traceback from the pool
        ("groups:\n  - name: a\n    urls: [http://h:99999/v1]", "has no valid port"),
        ("groups:\n  - name: a\n    urls: [http://h:abc/v1]", "has no valid port"),
        ("groups:\n  - name: a\n    urls: [http://x]\n    wieght: 3", "unknown field"),
        (
            "groups:\n  - name: a\n    urls: [http://x]\ntenants:\n  - name: t\n    priority: vip",
            "priority 'vip'",
        ),
        ("groups:\n  - name: a\n    urls: [http://x]\n    weight: 0", "weight 0"),
        (
            "groups:\n  - name: a\n    urls: [http://x]\nqueue: {priority_headroom: -1}",
            "queue.priority_headroom",
        ),
        ("groups: [\n", "not valid YAML"),
        ("- 1\n- 2", "mapping"),
        ("", "empty"),
    ],
)
def test_bad_config_says_what_is_wrong(tmp_path: Path, text: str, needle: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(write(tmp_path, text))
    assert needle in str(exc.value)


def test_flags_config() -> None:
    cfg = config_from_flags(["http://127.0.0.1:1/v1"], tpm=100, max_concurrency=2)
    assert cfg.defaults.tpm == 100 and cfg.groups[0].name == "default"
    with pytest.raises(ConfigError):
        config_from_flags(["not a url"])


def test_keys_hashed_and_found_in_constant_time(tmp_path: Path) -> None:
    k1, k2 = new_key(), new_key()
    ring = KeyRing()
    ring.add(parse_hashed(hash_key(k1), "x"), "a")
    ring.add(parse_hashed(hash_key(k2), "x"), "", admin=True)
    e1, e2 = ring.lookup(k1), ring.lookup(k2)
    assert e1 is not None and e1.tenant == "a" and not e1.admin
    assert e2 is not None and e2.admin
    assert ring.lookup(k1[:-1] + "x") is None and ring.lookup("") is None
    with pytest.raises(ConfigError, match="at least"):
        hash_key("short")
    with pytest.raises(ConfigError, match="hashed"):
        parse_hashed("plain-key-plain-key-plain", "tenants[0]")
    with pytest.raises(ConfigError, match="configured twice"):
        ring.add(parse_hashed(hash_key(k1), "x"), "b")
    f = tmp_path / "keys.txt"
    f.write_text(f"# comment\n{k1} alpha\n{hash_key(k2)}\n\n")
    rows = read_key_file(f)
    assert rows == [(hash_key(k1), "alpha"), (hash_key(k2), None)]
    assert k1 not in repr(rows)
    f.write_text("a b c\n")
    with pytest.raises(ConfigError, match=r"keys.txt:1"):
        read_key_file(f)


def test_peak_hours() -> None:
    tz = ZoneInfo("UTC")
    ph = PeakHours(["Mon-Fri 09:00-18:00", "Sat 22:00-02:00"], "UTC")
    assert ph.active(datetime(2026, 12, 7, 10, 0, tzinfo=tz)) is not None  # a Monday
    assert ph.active(datetime(2026, 12, 7, 18, 0, tzinfo=tz)) is None
    assert ph.active(datetime(2026, 12, 13, 1, 0, tzinfo=tz)) is not None  # Sunday 01:00
    assert ph.active(datetime(2026, 12, 13, 3, 0, tzinfo=tz)) is None
    assert ph.seconds_until_clear(datetime(2026, 12, 7, 17, 0, tzinfo=tz)) == 3600
    for bad in ["Funday 09:00-10:00", "9-10", "Mon 25:00-26:00"]:
        with pytest.raises(ConfigError):
            PeakHours([bad])
    with pytest.raises(ConfigError, match="time zone"):
        PeakHours([], "Mars/Olympus")


def test_audit_log_appends_whole_lines(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "a" / "audit.jsonl", replica="r1")
    log.write("step", reason="5 %", old_weights={"b": 100}, new_weights={"b": 95, "c": 5})
    log.write("rollback", reason="slow", evidence={"ttft": 1.5})
    rows = read_audit(tmp_path / "a" / "audit.jsonl")
    assert [r["action"] for r in rows] == ["step", "rollback"]
    assert rows[0]["new_weights"] == {"b": 95, "c": 5} and rows[1]["evidence"] == {"ttft": 1.5}
    assert rows[0]["time"].endswith("+00:00") and rows[0]["replica"] == "r1"


def test_quality_gate_reads_verdicts(tmp_path: Path) -> None:
    f = tmp_path / "v.json"
    f.write_text(json.dumps({"verdict": "pass"}))
    assert read_file(str(f)).verdict == "pass"
    f.write_text(json.dumps({"quality": {"verdict": "fail"}, "reason": "ppl +8%"}))
    r = read_file(str(f))
    assert r.verdict == "fail" and "ppl" in r.detail
    f.write_text("[1]")
    assert read_file(str(f)).verdict == "inconclusive"
    assert read_file(str(tmp_path / "missing.json")).verdict == "inconclusive"
    cmd = [sys.executable, "-c", 'print(\'{"verdict": "pass"}\')']
    assert run_command(cmd).verdict == "pass"
    assert run_command(["/nonexistent/quality"]).verdict == "inconclusive"


def test_steps_and_weights() -> None:
    assert parse_steps("5,25,50") == [5, 25, 50, 100]
    for bad in ["", "5,5", "0,10", "abc", "50,20"]:
        with pytest.raises(ConfigError):
            parse_steps(bad)
    w = step_weights({"b1": 60, "b2": 40, "cand": 0}, "cand", 10)
    assert w == pytest.approx({"b1": 54, "b2": 36, "cand": 10})
    assert rollback_weights({"b1": 60, "cand": 0}, "cand") == {"b1": 60, "cand": 0}
    with pytest.raises(ConfigError):
        step_weights({"cand": 0}, "cand", 10)


def test_quality_gate_reads_servetune_quality_json(tmp_path: Path) -> None:
    from servetune.results.quality_file import QualityReport, write_quality_report

    report = QualityReport.model_validate(
        {"verdict": "fail", "reason": "perplexity +9 % over the noise floor", "created_at": "t",
         "baseline": {"url": "http://b"}, "candidate": {"url": "http://c"}, "texts": "built-in"}
    )  # fmt: skip
    write_quality_report(tmp_path / "quality.json", report)
    for where in (tmp_path, tmp_path / "quality.json"):
        r = read_file(str(where))
        assert r.verdict == "fail" and "perplexity" in r.detail
    printed = report.model_dump_json()
    cmd = [sys.executable, "-c", f"print({printed!r})"]
    assert run_command(cmd).verdict == "fail"
