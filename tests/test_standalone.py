"""The repository stands alone: nothing in it refers to files outside it (a clone has them not)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHECKED = (
    "README.md",
    "CONTRIBUTING.md",
    "Makefile",
    "pyproject.toml",
    ".ci",
    "docs",
    "src",
    "tests",
    "benchmarks",
    "scripts",
)
OUTSIDE = re.compile(r"\.\./shared\b|/work/[a-z]|\bflock /")
"""A sibling checkout, a path of the machine the project was developed on, or a lock file
outside the repository that benchmarks were once run under."""


def _files() -> list[Path]:
    out: list[Path] = []
    for name in CHECKED:
        p = REPO / name
        if p.is_file():
            out.append(p)
        elif p.is_dir():
            out += [
                f
                for f in p.rglob("*")
                if f.is_file() and ".egg-info" not in str(f) and "__pycache__" not in f.parts
            ]
    return out


def test_no_file_points_outside_the_repository() -> None:
    hits = []
    for f in _files():
        if f == Path(__file__).resolve():
            continue
        try:
            text = f.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # binary
        for i, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line):
                hits.append(f"{f.relative_to(REPO)}:{i}: {line.strip()[:100]}")
    assert not hits, "paths outside the repository:\n" + "\n".join(hits)
