"""What the routing policies read of a gateway request: its session id and its prompt's block
keys (:mod:`servetune.routing.keys`), each worked out only when a policy asks for it.

The session id is the group's ``routing.session_header`` (``X-Session-ID`` by default), else
the body's OpenAI ``user`` field. The prompt is a completion's ``prompt`` (text, or token ids
as their decimal text) or a chat's messages (role and text of each, in order).
"""

from __future__ import annotations

from typing import Any

from servetune.http import Exchange
from servetune.routing.keys import chat_text, prompt_blocks, stable_hash

_UNSET: Any = object()


class RequestRoute:
    __slots__ = ("_blocks", "_chunk", "_session", "body", "ex", "header")

    def __init__(self, ex: Exchange, body: dict[str, Any] | None) -> None:
        self.ex = ex
        self.body = body
        self.header = b"x-session-id"
        """Set by the pool that routes it (its group's ``session_header``)."""
        self._session: int | None = _UNSET
        self._blocks: list[int] | None = None
        self._chunk = 0

    def session_id(self) -> str | None:
        v = self.ex.header(self.header)
        if v:
            return v.decode("utf-8", "replace")
        user = self.body.get("user") if self.body is not None else None
        return user if isinstance(user, str) and user else None

    def session_key(self) -> int | None:
        if self._session is _UNSET:
            sid = self.session_id()
            self._session = stable_hash(sid.encode()) if sid is not None else None
        return self._session

    def blocks(self, chunk: int) -> list[int]:
        if self._blocks is None or self._chunk != chunk:
            self._blocks = prompt_blocks(self._text(), chunk)
            self._chunk = chunk
        return self._blocks

    def _text(self) -> bytes:
        body = self.body
        if body is None:
            return b""
        msgs = body.get("messages")
        if isinstance(msgs, list):
            return chat_text(msgs)
        p = body.get("prompt", body.get("input"))
        if isinstance(p, str):
            return p.encode("utf-8", "replace")
        if isinstance(p, list) and p:
            first = p[0]  # a batch routes by its first prompt
            if isinstance(first, str):
                return first.encode("utf-8", "replace")
            if isinstance(first, list):
                return " ".join(map(str, first)).encode()
            return " ".join(map(str, p)).encode()
        return b""
