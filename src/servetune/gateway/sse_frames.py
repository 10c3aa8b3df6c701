"""Where SSE events end in a buffer: the blank line (LF or CRLF) after an event.

Only ``find``/``rfind`` in C, no step per byte or per event: the relay calls these for every
piece it scans (:mod:`servetune.gateway.relay`), the output estimate once per stream
(:mod:`servetune.gateway.output_estimate`).
"""

from __future__ import annotations


def last_event_end(buf: bytes) -> int:
    """Index just past the last blank line that ends an SSE event (-1: none). A CRLF ending
    is looked for only after the last LF one (one that ends later starts at or after it)."""
    i = buf.rfind(b"\n\n")
    j = buf.rfind(b"\n\r\n", max(i, 0))
    if j >= 0:
        return max(i + 2, j + 3)
    return i + 2 if i >= 0 else -1


def event_end(buf: bytes, at: int) -> int:
    """Index just past the blank line ending the event that holds position ``at``. A CRLF
    ending is looked for only before the first LF one (one that ends sooner starts before)."""
    i = buf.find(b"\n\n", at)
    if i < 0:
        j = buf.find(b"\n\r\n", at)
        return j + 3 if j >= 0 else -1
    j = buf.find(b"\n\r\n", at, i + 2)
    return j + 3 if j >= 0 else i + 2


def ends_event(piece: bytes) -> bool:
    """Does ``piece`` end with the blank line that ends an SSE event?"""
    return piece.endswith(b"\n\n") or piece.endswith(b"\n\r\n")
