"""Incremental Server-Sent Events parser over raw bytes.

Tolerant of what real servers send: ``data:`` with or without a space, CRLF or LF line ends
(split anywhere across reads), comments and keep-alives (``: ping``), ``event:``/``id:``/
``retry:`` fields, multi-line ``data`` (joined with ``\\n``), and events without data
(ignored). The common case — one ``data: {...}`` line per event — takes a fast path.

What the spec would ignore but no OpenAI-compatible server sends — a line whose field is none
of ``data``, ``event``, ``id``, ``retry`` (garbage, or a body that is not SSE at all) — is
reported by :meth:`SSEParser.inspect_block`, so the stream layer can call the event malformed.
"""

from __future__ import annotations

KNOWN_FIELDS = frozenset((b"data", b"event", b"id", b"retry"))


class SSEParser:
    """Feed bytes as they arrive; get back the complete events' (event name, data) pairs."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, data: bytes) -> list[tuple[bytes, bytes]]:
        out: list[tuple[bytes, bytes]] = []
        for raw in self.blocks(data):
            if raw.startswith(b"data:") and b"\n" not in raw:  # fast path
                payload = raw[5:]
                out.append((b"message", payload[1:] if payload[:1] == b" " else payload))
                continue
            event = self.parse_block(raw)
            if event is not None:
                out.append(event)
        return out

    def blocks(self, data: bytes) -> list[bytes]:
        """The raw text of every event completed by ``data`` (line ends normalised to LF)."""
        buf = self._buf + data if self._buf else data
        if b"\r" in buf:
            # A CR at the very end may be the first half of a CRLF: keep it for the next read.
            tail = b"\r" if buf.endswith(b"\r") else b""
            if tail:
                buf = buf[:-1]
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n") + tail
        parts = buf.split(b"\n\n")
        self._buf = parts.pop()
        return parts

    def flush(self) -> list[tuple[bytes, bytes]]:
        """Events left when the stream closes without a final blank line."""
        rest = self.tail()
        if not rest:
            return []
        event = self.parse_block(rest)
        return [event] if event is not None else []

    def tail(self) -> bytes:
        """What is left unterminated (no final blank line) when the stream ends; empties it."""
        rest, self._buf = self._buf.rstrip(b"\r\n"), b""
        return rest.replace(b"\r\n", b"\n").replace(b"\r", b"\n")

    @staticmethod
    def parse_block(raw: bytes) -> tuple[bytes, bytes] | None:
        name, data, _ = SSEParser.inspect_block(raw)
        return None if data is None else (name, data)

    @staticmethod
    def inspect_block(raw: bytes) -> tuple[bytes, bytes | None, bytes | None]:
        """(event name, data or None when the event has none, the first line whose field is
        unknown or None)."""
        name = b"message"
        data: list[bytes] = []
        unknown: bytes | None = None
        for line in raw.split(b"\n"):
            if not line or line.startswith(b":"):
                continue
            field, _, value = line.partition(b":")
            if value[:1] == b" ":
                value = value[1:]
            if field == b"data":
                data.append(value)
            elif field == b"event":
                name = value
            elif field not in KNOWN_FIELDS and unknown is None:
                unknown = line
        return name, (b"\n".join(data) if data else None), unknown
