"""Reading one streamed OpenAI response: per-chunk stamps, tokens, usage and errors.

The rules follow ``vllm bench serve`` (see docs/metrics.md): every SSE event whose
``choices`` list is non-empty is a content chunk — even one with empty text (a partial UTF-8
character) or a chat role-only opening chunk; a usage-only final event (empty ``choices``)
carries the token counts; ``[DONE]`` ends the stream; an error object ends it as failed.
"""

from __future__ import annotations

from typing import Any

import orjson

from servetune.client.sse import SSEParser

_DONE = b"[DONE]"


class StreamState:
    """Accumulates what the events of one response say. One instance per request."""

    __slots__ = (
        "chat",
        "chunk_ns",
        "chunk_tokens",
        "completion_tokens",
        "done",
        "error",
        "finish_reason",
        "malformed",
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
        self.finish_reason: str | None = None
        self.error: str | None = None
        self.done = False
        self.malformed = 0

    def feed(self, data: bytes, now_ns: int) -> None:
        """Process bytes read at ``now_ns`` (one stamp per read: events in it arrived together).

        The hot path: one ``data: {...}`` line carrying a plain content chunk (the bulk of
        every stream) is parsed once and goes straight to `_content`; anything else goes
        through the general rules.
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
            if type(obj) is dict:
                choices = obj.get("choices")
                if choices and "usage" not in obj and "error" not in obj:
                    content(choices[0], now_ns)
                    plain += 1
                else:
                    self._object(b"message", obj, now_ns)
                continue
            event = SSEParser.parse_block(raw)
            if event is not None:
                self._event(event[0], event[1], now_ns)
        if plain:
            self.usage_every_chunk = False

    def close(self, now_ns: int) -> None:
        for name, payload in self.parser.flush():
            self._event(name, payload, now_ns)

    def _event(self, name: bytes, payload: bytes, now_ns: int) -> None:
        if payload == _DONE or payload.strip() == _DONE:
            self.done = True
            return
        try:
            obj = orjson.loads(payload)
        except orjson.JSONDecodeError:
            self.malformed += 1
            return
        self._object(name, obj, now_ns)

    def _object(self, name: bytes, obj: Any, now_ns: int) -> None:
        if not isinstance(obj, dict):
            self.malformed += 1
            return
        if name == b"error" or "error" in obj or obj.get("object") == "error":
            self.error = "server error mid-stream: " + error_message(obj)
            self.done = True
            return
        choices = obj.get("choices")
        usage = obj.get("usage")
        if choices:
            self._content(choices[0], now_ns)
            if isinstance(usage, dict) and "completion_tokens" in usage:
                prev = self.completion_tokens or 0
                self.chunk_tokens.append(int(usage["completion_tokens"]) - prev)
            else:
                self.usage_every_chunk = False
        if isinstance(usage, dict):
            if usage.get("completion_tokens") is not None:
                self.completion_tokens = int(usage["completion_tokens"])
            if usage.get("prompt_tokens") is not None:
                self.prompt_tokens = int(usage["prompt_tokens"])

    def _content(self, choice: Any, now_ns: int) -> None:
        """A content chunk: its stamp, its text (kept in case the server sends no usage)."""
        self.chunk_ns.append(now_ns)
        if self.chat:
            delta = choice.get("delta") or {}
            text = delta.get("content") or delta.get("reasoning_content")
        else:
            text = choice.get("text")
        if text:
            self.texts.append(text)
        if choice.get("finish_reason"):
            self.finish_reason = choice["finish_reason"]

    def generated_text(self) -> str:
        return "".join(self.texts)


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
