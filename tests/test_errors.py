"""Reason codes: every error carries one, and every code a raise site passes is in the
exception tree's docstring (the one list of them)."""

from __future__ import annotations

import re
from pathlib import Path

import servetune.errors as errors
from servetune.errors import ConfigError, ServetuneError, SimError

SRC = Path(errors.__file__).parent


def test_every_error_has_a_code() -> None:
    assert ServetuneError("x").code == "error"
    assert ConfigError("x").code == "config"
    assert SimError("x", code="sim.no_kv_memory").code == "sim.no_kv_memory"
    assert str(ConfigError("what", hint="do this")) == "what\n  hint: do this"


def test_every_code_raised_is_documented() -> None:
    doc = errors.__doc__ or ""
    listed: set[str] = set()
    for line in doc.splitlines():
        m = re.match(r"^    ([a-z_.]+(?:, [a-z_.]+)*)\s{2,}", line)
        if m:
            listed |= set(m.group(1).split(", "))
    used: set[str] = set()
    for path in SRC.rglob("*.py"):
        text = path.read_text()
        used |= set(re.findall(r'\bcode="([a-z_]+(?:\.[a-z_]+)+)"', text))
        used |= set(re.findall(r'default_code = "([a-z_.]+)"', text))
    missing = sorted(c for c in used if c not in listed)
    assert not missing, f"codes raised but not in errors.py's docstring: {missing}"
