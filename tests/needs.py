"""What a test needs from the machine, and what happens when it is not there.

``need(what, present, how)``: outside CI a missing piece skips the test with the reason and
the command that provides it; under ``CI=true`` it fails the test — CI runs the project's own
set-up (``make test``: ``scripts/ci-system-deps.sh``, ``scripts/provision_engines.sh``), so a
missing piece there is a broken set-up, never a silent skip.
"""

from __future__ import annotations

import os

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def need(what: str, present: object, how: str) -> None:
    """Skip (or, under CI=true, fail) unless ``present`` is truthy."""
    if present:
        return
    msg = f"{what} is missing: {how}"
    if in_ci():
        pytest.fail(f"{msg} (CI=true: the test set-up must provide it)", pytrace=False)
    pytest.skip(msg)


SYSTEM_DEPS = "run `bash scripts/ci-system-deps.sh` (as root or with sudo; `make test` runs it)"
"""How to get a Debian package the tests need."""
