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


class StreamTally(Protocol):
    """What a stream's relay counted (:class:`~servetune.gateway.relay.Relay`)."""

    events: int
    """Data events passed while no ``usage`` was in."""
    nbytes: int
    """Bytes of the events counted (with their framing)."""
    sample: list[bytes]
    """The stream's opening bytes, at most :data:`SAMPLE_BYTES`."""


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
    events = max(0, stream.events - n_other)
    if exact:
        envelope = (text_events_bytes - text_bytes) / n_text
        body = stream.nbytes - other_bytes - events * envelope
        est = round(body * tokens / text_bytes)
    else:
        est = round(events * tokens / n_text)
    return max(floor, est)
