"""The scripted server's injected faults, as data the HTTP side only has to play.

Whatever carries the bytes, a request's fate is decided here from the :class:`Script` and the
request's number (1-based, in arrival order):

- :func:`refusal` — answer with an HTTP error instead of a stream (``fail_every``);
- :func:`before_head` — reset the connection before any answer, or hold the head back
  (``reset_before_head_every``, ``stall_head_every``);
- :func:`shape_stream` — the events to pace out and how the body ends: normally (the SSE tail
  and the end of the HTTP body), ``end`` (the HTTP body ends properly but the SSE stream is cut:
  no finish_reason, no usage, no ``[DONE]``), or ``reset`` (the connection is aborted).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import orjson

from servetune.testserver.script import Script

Ending = Literal["complete", "end", "reset"]


class Renderer(Protocol):
    """What the server renders events with (``ScriptedServer``)."""

    script: Script

    def event(self, obj: Any) -> bytes: ...

    def chunk_event(
        self, chat: bool, i: int, n_tokens: int, finish: str | None, usage: dict[str, int] | None
    ) -> bytes: ...

    def chunks(self, chat: bool, prompt_tokens: int, n: int) -> list[bytes]: ...

    def tail(self, prompt_tokens: int, n: int) -> bytes: ...


@dataclass
class StreamShape:
    """One response body: ``events[i]`` goes out at token i's time, then ``tail``, then the
    ending. ``whole`` is True when it is the plain, unaltered response."""

    events: list[bytes]
    tail: bytes
    ending: Ending = "complete"
    aborted: bool = False
    """Counted as aborted by the server (it stopped generating for it)."""
    whole: bool = True
    raw_body: bytes | None = None
    """A body to send as is, instead of events (``not_sse``)."""
    extra: dict[str, Any] = field(default_factory=dict)


def _every(n: int, nth: int) -> bool:
    return n > 0 and nth % n == 0


def alters_streams(s: Script) -> bool:
    """Whether some stream is shaped by a fault (the pre-rendered fast path cannot be used)."""
    return any(
        (
            s.error_midstream_every,
            s.disconnect_every,
            s.truncate_every,
            s.malformed_every,
            s.short_output_every,
            s.abort_every,
            s.close_framing,
            s.gzip,
            s.events_per_write > 1,
        )
    )


def refusal(s: Script, nth: int) -> tuple[int, list[tuple[bytes, bytes]], bytes] | None:
    """(status, extra headers, JSON body) when request ``nth`` is refused."""
    if not _every(s.fail_every, nth):
        return None
    code = s.fail_status
    headers = [(b"Retry-After", b"1")] if code in (429, 503) else []
    body = orjson.dumps(
        {
            "error": {
                "message": "injected failure" if code != 429 else "injected rate limit",
                "type": "RateLimitError" if code == 429 else "InternalServerError",
                "code": code,
            }
        }
    )
    return code, headers, body


def before_head(s: Script, nth: int) -> Literal["reset"] | float | None:
    """What happens to request ``nth`` before its head: ``"reset"`` (the connection is
    aborted), a delay in seconds, or None."""
    if _every(s.reset_before_head_every, nth):
        return "reset"
    if _every(s.stall_head_every, nth) and s.stall_head_ms > 0:
        return s.stall_head_ms / 1000
    return None


def _malformed_event(s: Script, srv: Renderer, chat: bool, i: int) -> bytes:
    sep = b"\r\n\r\n" if s.crlf else b"\n\n"
    kind = s.malformed_kind
    if kind == "garbage_line":
        return b"garbage that is not an SSE field" + sep
    if kind == "invalid_json":
        return b"data: {not json" + sep
    if kind == "truncated_json":
        whole = srv.chunk_event(chat, i, 1, None, None).rstrip(b"\r\n")
        return whole[: len(whole) // 2] + sep
    if kind == "non_object":
        return b"data: [1, 2]" + sep
    return srv.event({"id": "cmpl-1", "object": "chunk", "choices": "oops"})  # bad_choices


def shape_stream(srv: Renderer, chat: bool, nth: int, prompt_tokens: int, n: int) -> StreamShape:
    """The body of streamed request ``nth`` (``n`` tokens asked) under the script's faults."""
    s = srv.script
    events = srv.chunks(chat, prompt_tokens, n)
    half = len(events) // 2
    if _every(s.disconnect_every, nth):
        return StreamShape(events[:half], b"", "reset", aborted=True, whole=False)
    if _every(s.error_midstream_every, nth):
        err = srv.event(
            {
                "error": {
                    "message": "injected error mid-stream",
                    "type": "InternalError",
                    "code": s.error_midstream_code,
                }
            }
        )
        sep = b"\r\n\r\n" if s.crlf else b"\n\n"
        return StreamShape([*events[:half], err], b"data: [DONE]" + sep, aborted=True, whole=False)
    if _every(s.truncate_every, nth):
        at = s.truncate_at if s.truncate_at is not None else half
        cut: list[bytes] = []
        token = 0
        for ev in events:  # events may carry several tokens: cut at whole events
            if token >= at:
                break
            # a truncated stream never shows its last chunk's finish_reason or usage
            cut.append(ev.replace(b'"finish_reason":"length"', b'"finish_reason":null'))
            token += s.tokens_per_chunk
        return StreamShape(cut, b"", "end", aborted=True, whole=False)
    if _every(s.malformed_every, nth):
        if s.malformed_kind == "not_sse":
            body = orjson.dumps(
                {
                    "id": "cmpl-1",
                    "object": "text_completion",
                    "choices": [{"index": 0, "text": " w0" * n, "finish_reason": "length"}],
                    "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": n},
                }
            )
            return StreamShape([], b"", raw_body=body, whole=False)
        bad = _malformed_event(s, srv, chat, half)
        return StreamShape(
            [*events[:half], bad, *events[half:]], srv.tail(prompt_tokens, n), whole=False
        )
    if _every(s.abort_every, nth):
        m = max(1, n // 2)
        gave_up = srv.chunks(chat, prompt_tokens, m)
        finish = b'"finish_reason":"%s"' % s.abort_reason.encode()
        gave_up[-1] = gave_up[-1].replace(b'"finish_reason":"length"', finish)
        return StreamShape(gave_up, srv.tail(prompt_tokens, m), aborted=True, whole=False)
    if _every(s.short_output_every, nth):
        m = max(1, n // 2)
        short = srv.chunks(chat, prompt_tokens, m)
        short[-1] = short[-1].replace(b'"finish_reason":"length"', b'"finish_reason":"stop"')
        return StreamShape(short, srv.tail(prompt_tokens, m), whole=False)
    return StreamShape(events, srv.tail(prompt_tokens, n))
