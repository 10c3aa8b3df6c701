"""Recognise why an engine failed to start, from its log.

Each :class:`~servetune.profiles.FailurePattern` is a regular expression over one log line,
a kind, and a hint; an engine's come from its profile, the common ones after them. The first
pattern (in order: the specific before the generic) that matches any line wins, and the
error quotes that line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from servetune.profiles import FailurePattern, failure_patterns

MAX_QUOTE = 600  # characters of a log line quoted in an error


@dataclass(frozen=True)
class StartFailure:
    kind: str
    line: str
    hint: str


def recognise(
    lines: Iterable[str], patterns: Sequence[FailurePattern] | None = None
) -> StartFailure | None:
    """The most specific failure any of LINES shows, quoting the first line that shows it.
    PATTERNS: an engine's (:func:`servetune.profiles.failure_patterns`); the common ones by
    default."""
    patterns = failure_patterns(None) if patterns is None else patterns
    best: tuple[int, StartFailure] | None = None
    for line in lines:
        text = line.strip()
        if not text:
            continue
        for rank, pat in enumerate(patterns):
            if best is not None and rank >= best[0]:
                break
            if pat.regex.search(text):
                best = (rank, StartFailure(pat.kind, _clip(text), pat.hint))
                break
    return best[1] if best else None


def _clip(text: str) -> str:
    return text if len(text) <= MAX_QUOTE else text[: MAX_QUOTE - 1] + "…"


_ERRORISH = re.compile(r"(error|exception|fatal|abort|failed)", re.IGNORECASE)


def last_error_line(lines: list[str]) -> str | None:
    """When nothing is recognised: the last line that looks like an error, else the last line."""
    for line in reversed(lines):
        if _ERRORISH.search(line):
            return _clip(line.strip())
    for line in reversed(lines):
        if line.strip():
            return _clip(line.strip())
    return None
