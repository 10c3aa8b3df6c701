"""The bytes of HTTP/1.1 that servetune writes: response heads, chunk framing, error bodies.

Parsing is llhttp's (:mod:`servetune.http.connection`, :mod:`servetune.http.response`); this
module only builds. Everything returns ``bytes`` ready for ``transport.write``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

REASONS: dict[int, bytes] = {
    100: b"Continue",
    200: b"OK",
    204: b"No Content",
    400: b"Bad Request",
    401: b"Unauthorized",
    403: b"Forbidden",
    404: b"Not Found",
    405: b"Method Not Allowed",
    408: b"Request Timeout",
    409: b"Conflict",
    413: b"Content Too Large",
    422: b"Unprocessable Content",
    429: b"Too Many Requests",
    431: b"Request Header Fields Too Large",
    500: b"Internal Server Error",
    501: b"Not Implemented",
    502: b"Bad Gateway",
    503: b"Service Unavailable",
    504: b"Gateway Timeout",
}

JSON = b"application/json"
SSE = b"text/event-stream; charset=utf-8"
TEXT = b"text/plain; charset=utf-8"
LAST_CHUNK = b"0\r\n\r\n"
"""The end of a chunked body (no trailers)."""

Headers = Iterable[tuple[bytes, bytes]]


def status_line(status: int) -> bytes:
    return b"HTTP/1.1 %d %s\r\n" % (status, REASONS.get(status, b"Status"))


def head(
    status: int,
    content_type: bytes | None,
    length: int | None,
    headers: Headers = (),
    close: bool = False,
) -> bytes:
    """A response head. ``length`` None: a chunked body; -1: a body framed by closing the
    connection (HTTP/1.0 peers); otherwise ``Content-Length``."""
    out = [status_line(status)]
    if content_type is not None:
        out.append(b"Content-Type: %s\r\n" % content_type)
    for name, value in headers:
        out.append(b"%s: %s\r\n" % (name, value))
    if length is None:
        out.append(b"Transfer-Encoding: chunked\r\n")
    elif length >= 0:
        out.append(b"Content-Length: %d\r\n" % length)
    if close:
        out.append(b"Connection: close\r\n")
    out.append(b"\r\n")
    return b"".join(out)


def frame(data: bytes) -> bytes:
    """One chunk of a chunked body (``data`` must not be empty: that is the last chunk)."""
    return b"%x\r\n%s\r\n" % (len(data), data)


def frame_last(data: bytes = b"") -> bytes:
    """``data`` as a chunk (when any), then the end of the body."""
    return (b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data)) if data else LAST_CHUNK


def openai_error(status: int, message: str, type_: str | None = None) -> bytes:
    """The error body OpenAI's API returns: ``{"error": {"message", "type", "param", "code"}}``."""
    return orjson.dumps(
        {
            "error": {
                "message": message,
                "type": type_ or _type(status),
                "param": None,
                "code": status,
            }
        }
    )


def vllm_error(status: int, message: str, type_: str | None = None) -> bytes:
    """The error body vLLM's OpenAI server returns (0.6–0.9): a flat object with ``"object":
    "error"``."""
    obj: dict[str, Any] = {
        "object": "error",
        "message": message,
        "type": type_ or _type(status),
        "param": None,
        "code": status,
    }
    return orjson.dumps(obj)


def _type(status: int) -> str:
    return {
        400: "BadRequestError",
        401: "AuthenticationError",
        403: "PermissionDeniedError",
        404: "NotFoundError",
        405: "MethodNotAllowed",
        413: "BadRequestError",
        429: "RateLimitError",
    }.get(status, "InternalServerError" if status >= 500 else "BadRequestError")
