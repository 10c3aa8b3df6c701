"""The client side: the responses arriving on one connection, parsed by llhttp.

:class:`ResponseReader` is a base class for a client connection. Feed it the bytes as they
are read (:meth:`ResponseReader.feed`); it calls, per response:

- ``on_head(status, headers)`` once the status line and headers are in (interim ``1xx``
  responses are skipped; ``headers`` are ``(name, value)`` byte pairs, names lower-case);
- ``on_body(data)`` for every piece of the body as it arrives, de-chunked, with no copy
  beyond llhttp's slice of the read (a chunk split across reads comes in pieces; several
  chunks in one read come one call each);
- ``on_end(keep_alive)`` when the body is complete (``keep_alive``: the connection may carry
  the next request).

When the connection closes, :meth:`ResponseReader.at_close` says what that means for the
response in progress: complete (a body framed by the close itself), cut off mid-body, cut
off before the head, or nothing in progress. The stream layer above (SSE parsing, stamps,
end-of-stream rules) sees only these events.
"""

from __future__ import annotations

from typing import Any, Literal

import httptools

CloseMeaning = Literal["idle", "complete", "before_head", "mid_body"]


class ProtocolError(Exception):
    """The server's bytes are not HTTP/1.1: a short, countable reason."""


class ResponseReader:
    """Parses a connection's responses; subclasses implement ``on_head``, ``on_body`` and
    ``on_end`` (see the module docstring)."""

    def __init__(self) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self._headers: list[tuple[bytes, bytes]] = []
        self._framed = False
        """The response in progress has a Content-Length or is chunked."""
        self._interim = False
        self._state = 0  # 0 idle, 1 head, 2 body

    # -- the subclass's side --------------------------------------------------------------
    def on_head(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        raise NotImplementedError

    def on_body(self, data: bytes) -> None:
        raise NotImplementedError

    def on_end(self, keep_alive: bool) -> None:
        raise NotImplementedError

    # -- feeding --------------------------------------------------------------------------
    def feed(self, data: bytes | memoryview) -> None:
        """Parse bytes read from the connection (a memoryview is read in place)."""
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            raise ProtocolError(_reason(exc)) from exc
        except httptools.HttpParserUpgrade as exc:
            raise ProtocolError("unexpected protocol upgrade") from exc

    def at_close(self) -> CloseMeaning:
        """What the connection closing means for the response in progress. The parser is let
        go (it holds this object's methods: a cycle otherwise); nothing may be fed after."""
        self._parser = _CLOSED
        if self._state == 2:
            return "mid_body" if self._framed else "complete"
        return "before_head" if self._state == 1 else "idle"

    @property
    def in_response(self) -> bool:
        """Has a response begun (any byte of it parsed) and not ended?"""
        return self._state != 0

    # -- llhttp callbacks -----------------------------------------------------------------
    def on_message_begin(self) -> None:
        self._state = 1
        self._headers = []
        self._framed = False

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        self._headers.append((name, value))
        if name == b"content-length" or name == b"transfer-encoding":
            self._framed = True

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if 100 <= status < 200:
            self._interim = True  # the real response follows
            return
        self._state = 2
        self.on_head(status, self._headers)

    def on_message_complete(self) -> None:
        if self._interim:
            self._interim = False
            self._state = 0
            return
        self._state = 0
        self.on_end(self._parser.should_keep_alive())


class _Closed:
    def feed_data(self, data: bytes | memoryview) -> None:
        raise httptools.HttpParserError("bytes after the connection closed")

    def get_status_code(self) -> int:
        return 0

    def should_keep_alive(self) -> bool:
        return False


_CLOSED: Any = _Closed()


def _reason(exc: Exception) -> str:
    cause = exc.__context__
    if cause is not None and not isinstance(cause, httptools.HttpParserError):
        raise cause  # the subclass's callback failed: its error, not a parse error
    text = str(exc).strip() or type(exc).__name__
    if "chunk" in text.lower():
        return "malformed chunked encoding"
    if isinstance(exc, httptools.HttpParserInvalidStatusError) or "status" in text.lower():
        return "malformed HTTP status line"
    return f"malformed HTTP response ({text})"
