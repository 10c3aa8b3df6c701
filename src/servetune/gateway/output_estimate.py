"""The output tokens of a stream that ended without ``usage``, from what it streamed.

The relay (:mod:`servetune.gateway.relay`) counts a stream's data events and their bytes and
keeps its first :data:`SAMPLE_BYTES`; when the stream ends without the engine's ``usage`` (a
client that hangs up mid-stream) :func:`output_estimate` turns those into output tokens, once,
on that path only — an engine that sends several tokens per event (speculative decoding, a
stream interval above 1) is not charged per event.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Protocol

import orjson

from servetune.gateway.sse_frames import last_event_end

SAMPLE_BYTES = 4096
"""The stream's opening bytes kept for :func:`output_estimate`."""
SPREAD_BYTES = 8192
"""About how many bytes of pieces spread along the whole stream are kept."""
PIECE_BYTES = 1024
"""At most this much of one spread piece is kept."""


class StreamTally(Protocol):
    """What a stream's relay counted (:class:`~servetune.gateway.relay.Relay`)."""

    events: int
    """Data events passed while no ``usage`` was in."""
    nbytes: int
    """Bytes of the events counted (with their framing)."""
    sample: list[bytes]
    """The stream's opening bytes, at most :data:`SAMPLE_BYTES`."""
    spread: list[bytes]
    """Pieces kept evenly along the whole stream (each at most :data:`PIECE_BYTES`)."""
    last_piece: bytes
    """The last piece counted."""


def event_text(obj: Any) -> str:
    """The generated text of one stream event (completions' ``text``; chat's ``content``,
    ``reasoning_content`` and tool-call arguments), of every choice."""
    if not isinstance(obj, dict) or not isinstance(obj.get("choices"), list):
        return ""
    out = []
    for c in obj["choices"]:
        if not isinstance(c, dict):
            continue
        if isinstance(c.get("text"), str):
            out.append(c["text"])
        d = c.get("delta")
        if isinstance(d, dict):
            for key in ("content", "reasoning_content", "reasoning"):
                if isinstance(d.get(key), str):
                    out.append(d[key])
            calls = d.get("tool_calls")
            if isinstance(calls, list):
                for call in calls:
                    fn = call.get("function") if isinstance(call, dict) else None
                    if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
                        out.append(fn["arguments"])
    return "".join(out)


def output_estimate(stream: StreamTally, count: Callable[[str], int]) -> int:
    """Output tokens of a stream that ended without usage, from what it streamed: the
    opening events kept give the bytes each event carries besides its text (its
    envelope: id, model, framing — constant along a stream) and the tokens per byte of
    text (``count``: the group's tokenizer, or the estimate); the stream's total bytes
    less its events' envelopes are its text. At least one token per content event.
    Falls back to the tokens per content event of the opening events when their text is
    written neither as UTF-8 nor with ``\\u`` escapes, and to the events when they hold
    no text. Runs once, on the settling of such a stream: nothing per event."""
    floor = max(0, stream.events - 1)
    if not stream.sample:
        return floor
    sample = b"".join(stream.sample)
    cut = last_event_end(sample)
    n_other = other_bytes = n_text = text_events_bytes = text_bytes = 0
    texts: list[str] = []
    exact = True
    crlf = b"\r\n" in sample
    for raw in sample[: max(cut, 0)].replace(b"\r\n", b"\n").split(b"\n\n"):
        line = raw.strip()
        if not line.startswith(b"data:") or line[5:].strip()[:1] != b"{":
            continue
        framed = len(raw) + 2 + (raw.count(b"\n") + 2 if crlf else 0)
        try:
            obj = orjson.loads(line[5:])
        except orjson.JSONDecodeError:
            continue
        text = event_text(obj)
        if not text:  # a role-only opening, a bare finish: an event without tokens
            n_other += 1
            other_bytes += framed
            continue
        esc = orjson.dumps(text)[1:-1]  # as vLLM (pydantic) writes it: UTF-8
        if esc not in line:  # as Python's json writes it: \\u escapes
            esc = json.dumps(text)[1:-1].encode()
            exact = exact and esc in line
        n_text += 1
        text_events_bytes += framed
        text_bytes += len(esc)
        texts.append(text)
    tokens = count("".join(texts)) if texts else 0
    if not tokens:
        return floor
    text_bytes_open, n_open = text_bytes, n_text
    events = max(0, stream.events - n_other)
    # tokens per byte of text (or per event) from the pieces spread along the stream: the
    # opening alone is biased wherever a stream's start differs from its whole (the
    # simulated engine's frequent short words first: +22 % charged)
    s_tokens, s_bytes, s_events = _spread_texts(stream.spread, count)
    if s_tokens and s_bytes:
        tokens, text_bytes, n_text = s_tokens, s_bytes, s_events
    if exact:
        envelope = (text_events_bytes - text_bytes_open) / n_open
        body = stream.nbytes - other_bytes - events * envelope - _done_bytes(stream.last_piece)
        est = round(body * tokens / text_bytes)
    else:
        est = round(events * tokens / n_text)
    return max(floor, est)


def _done_bytes(last: bytes) -> int:
    """Bytes of the stream's closing ``data: [DONE]`` (no text: not to be charged as some)."""
    at = last.rfind(b"[DONE]")
    if at < 0:
        return 0
    start = last.rfind(b"data:", 0, at)
    return len(last) - start if start >= 0 else 0


def _spread_texts(pieces: list[bytes], count: Callable[[str], int]) -> tuple[int, int, int]:
    """Tokens, bytes as written (UTF-8, else ``\\u`` escapes) and number of the events with
    text in the spread pieces — each piece parsed on its own and each event's text counted
    on its own: they are not contiguous, and no engine token spans two events."""
    tokens = nbytes = n = 0
    for piece in pieces:
        cut = last_event_end(piece)
        for raw in piece[: max(cut, 0)].replace(b"\r\n", b"\n").split(b"\n\n"):
            line = raw.strip()
            if not line.startswith(b"data:") or line[5:].strip()[:1] != b"{":
                continue
            try:
                text = event_text(orjson.loads(line[5:]))
            except orjson.JSONDecodeError:
                continue
            if not text:
                continue
            esc = orjson.dumps(text)[1:-1]  # as the opening's: UTF-8, else \\u escapes
            if esc not in line:
                esc = json.dumps(text)[1:-1].encode()
            tokens += count(text)
            nbytes += len(esc)
            n += 1
    return tokens, nbytes, n
