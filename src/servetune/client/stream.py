"""Reading one streamed OpenAI response: per-chunk stamps, tokens, usage, and whether the
stream was whole.

The rules follow ``vllm bench serve`` (see docs/metrics.md): every SSE event whose
``choices`` list is non-empty is a content chunk — even one with empty text (a partial UTF-8
character) or a chat role-only opening chunk; a usage-only final event (empty ``choices``)
carries the token counts; ``[DONE]`` ends the stream; an error object ends it as failed.

The contract with the transport: it hands over the body's bytes as they arrive (:meth:`feed`)
and says how the body ended — normally (:meth:`close`, then :meth:`verdict`), or not at all
(a reset or a timeout, which the client classifies without asking the stream). On a body that
ended normally, the stream decides whether the response was whole:

- an error object (``{"error": …}``, ``event: error``, or a whole 2xx body that is one such
  object instead of a stream) → failed, ``server_error`` (or ``rate_limited`` /
  ``client_error`` by the error's code);
- an event that does not parse (invalid or truncated JSON, not an object, a ``choices`` of
  the wrong shape, a line that is not SSE) → failed, ``malformed_event``;
- neither a ``finish_reason`` nor ``[DONE]`` by the end, or an event cut off by the end of the
  body → failed, ``truncated`` (a stream is whole with either: llama.cpp sends no ``[DONE]``);
- a ``finish_reason`` of ``abort`` or ``error`` (the engine gave up on the request) → failed,
  ``server_error``;
- whole, but not one content chunk → failed, ``no_output``.

A failed stream keeps its partial timings (chunk stamps, tokens) in the record; the summary
leaves them out of the success statistics.
"""

from __future__ import annotations

from typing import Any

import orjson

from servetune.client.sse import SSEParser
from servetune.results.record import ErrorClass, class_of_status

_DONE = b"[DONE]"
GAVE_UP = frozenset(("abort", "error"))
"""Finish reasons of a request the engine did not finish: vLLM's ``abort`` (aborted inside the
engine) and ``error`` (a request-level error); SGLang's ``abort`` too. The stream is well
formed, the response is not whole."""
_BAD = (AttributeError, TypeError, KeyError, IndexError, ValueError)
"""What a well-formed JSON object of the wrong shape raises when read as a chunk."""


class StreamState:
    """Accumulates what the events of one response say. One instance per request."""

    __slots__ = (
        "cached_tokens",
        "chat",
        "chunk_ns",
        "chunk_tokens",
        "completion_tokens",
        "cut_event",
        "done",
        "error",
        "error_code",
        "finish_reason",
        "malformed",
        "malformed_example",
        "parser",
        "prompt_tokens",
        "texts",
        "usage_every_chunk",
    )

    def __init__(self, chat: bool) -> None:
        self.chat = chat
        self.parser = SSEParser()
        self.chunk_ns: list[int] = []
        self.chunk_tokens: list[int] = []
        self.texts: list[str] = []
        self.usage_every_chunk = True
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.cached_tokens: int | None = None
        self.finish_reason: str | None = None
        self.error: str | None = None
        self.error_code: int | None = None
        self.done = False
        self.malformed = 0
        self.malformed_example: str | None = None
        self.cut_event = False

    def feed(self, data: bytes, now_ns: int) -> None:
        """Process bytes read at ``now_ns`` (one stamp per read: events in it arrived together).

        The hot path: one ``data: {...}`` line carrying a plain content chunk (the bulk of
        every stream) is parsed once and goes straight to `_content`; anything else goes
        through the general rules. Nothing raises: what does not parse is counted malformed.
        """
        loads = orjson.loads
        content = self._content
        plain = 0
        for raw in self.parser.blocks(data):
            obj = None
            if raw.startswith(b"data: {"):
                # One JSON object on one data line, the bulk of every stream. (A bytes slice:
                # orjson reads a memoryview at half the speed.) Anything else — more lines,
                # other fields, bad JSON — fails here and takes the general path below.
                try:
                    obj = loads(raw[6:])
                except orjson.JSONDecodeError:
                    pass
            try:
                if type(obj) is dict:
                    choices = obj.get("choices")
                    if choices and "usage" not in obj and "error" not in obj:
                        content(choices[0], now_ns)
                        plain += 1
                    else:
                        self._object(b"message", obj, now_ns)
                    continue
                self._block(raw, now_ns)
            except _BAD as exc:
                self._bad(raw, f"{type(exc).__name__}: {exc}")
        if plain:
            self.usage_every_chunk = False

    def close(self, now_ns: int) -> None:
        """The body ended normally: an event left without its closing blank line is read if it
        is whole, and marks the stream cut (``truncated``) if it is not."""
        rest = self.parser.tail()
        if not rest:
            return
        try:
            self._block(rest, now_ns, at_end=True)
        except _BAD as exc:
            self._bad(rest, f"{type(exc).__name__}: {exc}")

    def verdict(self) -> tuple[ErrorClass | None, str | None]:
        """(error class, message) of a body that ended normally, or (None, None) if whole."""
        if self.error is not None:
            code = self.error_code
            cls: ErrorClass = class_of_status(code) if code and code >= 400 else "server_error"
            return cls, self.error
        n = len(self.chunk_ns)
        if self.malformed:
            return "malformed_event", (
                f"malformed event: {self.malformed_example} "
                f"({self.malformed} malformed, {n} content chunks)"
            )
        if self.cut_event or not (self.done or self.finish_reason):
            why = "an event cut mid-way" if self.cut_event else "neither finish_reason nor [DONE]"
            return "truncated", f"stream truncated: ended with {why} after {n} content chunks"
        if self.finish_reason in GAVE_UP:
            return "server_error", (
                f"the server gave up on the request: finish_reason {self.finish_reason!r} "
                f"after {n} content chunks"
            )
        if not n:
            return "no_output", "stream ended with no token"
        return None, None

    # -- the general path -----------------------------------------------------------------
    def _block(self, raw: bytes, now_ns: int, *, at_end: bool = False) -> None:
        """One event; ``at_end``: the body's unterminated last one, which may be cut short."""
        name, payload, unknown = SSEParser.inspect_block(raw)
        if unknown is not None and at_end and self._error_body(raw):
            return
        if unknown is not None:
            field = unknown.partition(b":")[0]
            cut = raw.endswith(unknown) and any(f.startswith(field) for f in (b"data", b"event"))
            if at_end and cut:
                self.cut_event = True  # cut in the middle of a field's name
            else:
                self._bad(raw, "not an SSE field")
            return
        if payload is None:
            return  # an event with no data (id/retry only): nothing to read
        if payload.strip() == _DONE:
            self.done = True
            return
        try:
            obj = orjson.loads(payload)
        except orjson.JSONDecodeError:
            if name == b"error":  # an error event whose data is plain text: still the error
                if self.error is None:
                    text = payload.decode("utf-8", "replace").strip()[:300]
                    self.error = "server error mid-stream: " + (text or "event: error")
                return
            if at_end:
                self.cut_event = True  # cut mid-event by the end of the body
            else:
                self._bad(raw, "not valid JSON")
            return
        self._object(name, obj, now_ns)

    def _error_body(self, raw: bytes) -> bool:
        """A 2xx body that is one JSON error object instead of a stream (some proxies answer
        errors so): the error, classed by its code like an HTTP error, not a malformed event."""
        if self.chunk_ns or not raw.lstrip().startswith(b"{"):
            return False
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return False
        if not isinstance(obj, dict) or not ("error" in obj or obj.get("object") == "error"):
            return False
        if self.error is None:
            self.error = "error body: " + error_message(obj)
            self.error_code = error_code(obj)
        return True

    def _bad(self, raw: bytes, why: str) -> None:
        self.malformed += 1
        if self.malformed_example is None:
            text = raw[:80].decode("utf-8", "replace")
            self.malformed_example = f"{why}: {text!r}"

    def _object(self, name: bytes, obj: Any, now_ns: int) -> None:
        if not isinstance(obj, dict):
            raise TypeError(f"a JSON {type(obj).__name__}, not an object")
        if name == b"error" or "error" in obj or obj.get("object") == "error":
            if self.error is None:
                self.error = "server error mid-stream: " + error_message(obj)
                self.error_code = error_code(obj)
            return
        choices = obj.get("choices")
        usage = obj.get("usage")
        if choices is not None and not isinstance(choices, list):
            raise TypeError("choices is not a list")
        if usage is not None and not isinstance(usage, dict):
            raise TypeError("usage is not an object")
        if choices:
            self._content(choices[0], now_ns)
            if usage is not None and "completion_tokens" in usage:
                prev = self.completion_tokens or 0
                self.chunk_tokens.append(int(usage["completion_tokens"]) - prev)
            else:
                self.usage_every_chunk = False
        if usage is not None:
            if usage.get("completion_tokens") is not None:
                self.completion_tokens = int(usage["completion_tokens"])
            if usage.get("prompt_tokens") is not None:
                self.prompt_tokens = int(usage["prompt_tokens"])
            details = usage.get("prompt_tokens_details")
            if isinstance(details, dict) and details.get("cached_tokens") is not None:
                # vLLM (--enable-prompt-tokens-details), SGLang, the simulated engine
                self.cached_tokens = int(details["cached_tokens"])

    def _content(self, choice: Any, now_ns: int) -> None:
        """A content chunk: its stamp, its text (kept in case the server sends no usage)."""
        if self.chat:
            delta = choice.get("delta") or {}
            text = delta.get("content") or delta.get("reasoning_content")
        else:
            text = choice.get("text")
        self.chunk_ns.append(now_ns)
        if text:
            self.texts.append(text)
        reason = choice.get("finish_reason")
        if reason:
            self.finish_reason = finish_reason_word(reason)

    def generated_text(self) -> str:
        return "".join(t for t in self.texts if isinstance(t, str))


def finish_reason_word(reason: Any) -> str:
    """A finish reason as a word: OpenAI servers send a string; SGLang's native shape is an
    object (``{"type": "length", "length": 16}``), whose type is the word."""
    if isinstance(reason, str):
        return reason
    if isinstance(reason, dict) and isinstance(reason.get("type"), str):
        return str(reason["type"])
    return str(reason)


def error_message(obj: Any) -> str:
    """The human message inside an OpenAI/vLLM/TGI/llama.cpp error body."""
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            for key in ("message", "detail", "msg"):
                if isinstance(err.get(key), str):
                    return str(err[key])
        if isinstance(err, str):
            return err
        for key in ("message", "detail"):
            if isinstance(obj.get(key), str):
                return str(obj[key])
    return str(obj)[:300]


def error_code(obj: Any) -> int | None:
    """The HTTP-like code of an error object (``{"error": {"code": 429}}``), if it has one."""
    if not isinstance(obj, dict):
        return None
    err = obj.get("error", obj)
    for src in (err, obj) if isinstance(err, dict) else (obj,):
        code = src.get("code")
        if isinstance(code, int) and 100 <= code < 600:
            return code
        if isinstance(code, str) and code.isdigit() and 100 <= int(code) < 600:
            return int(code)
    return None
