"""The bytes a generation request gets back from the real-time server, shaped as vLLM's.

Streamed: one ``data: {...}\\n\\n`` SSE event per token (a chat stream opens with a role-only
chunk, sent with the first token as vLLM does), with ``stream_options.include_usage`` a last
event with empty ``choices`` and ``usage``, then ``data: [DONE]``. Not streamed: one JSON
body with the whole text and the usage. Text is word-like tokens from the approximate
counter's word list, so that a client re-counting it gets the count back. The usage says how
many prompt tokens came from the prefix cache (``prompt_tokens_details.cached_tokens``, as vLLM
with ``--enable-prompt-tokens-details`` and SGLang say it).

The bytes of a token are assembled from a per-request prefix and a per-position tail: no JSON
encoding per token.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from servetune.sim.engine import SimRequest
from servetune.workload.tokens import ApproxTokenizer

TOKEN_WORDS = ApproxTokenizer().words
"""The words the simulated engine generates, token by token, in this order."""
WORDS = [(" " + w).encode() for w in TOKEN_WORDS]
"""Token texts (with their leading space)."""

_TAIL_CHAT = b'"},"logprobs":null,"finish_reason":null}]}\n\n'
_TAIL_CHAT_LAST = b'"},"logprobs":null,"finish_reason":"length"}]}\n\n'
_TAIL_TEXT = b'","logprobs":null,"finish_reason":null,"stop_reason":null}]}\n\n'
_TAIL_TEXT_LAST = b'","logprobs":null,"finish_reason":"length","stop_reason":null}]}\n\n'
_CHAT_DELTA = b'"delta":{"content":"'
DONE = b"data: [DONE]\n\n"


class Stream:
    """One request in flight: its engine request, where its bytes go (``out``: the HTTP
    exchange, opaque here), and how to shape them."""

    __slots__ = (
        "chat",
        "closed",
        "created",
        "include_usage",
        "out",
        "prefix",
        "req",
        "rid",
        "sent",
        "stream",
        "word",
    )

    def __init__(
        self,
        out: Any,
        req: SimRequest,
        rid: str,
        model: str,
        chat: bool,
        stream: bool,
        include_usage: bool,
    ) -> None:
        self.out = out
        self.req = req
        self.rid = rid
        self.chat = chat
        self.stream = stream
        self.include_usage = include_usage
        self.sent = 0
        self.closed = False
        self.created = int(time.time())
        self.word = req.id * 7
        head = b'{"id":"%s","object":"%s","created":%d,"model":%s,"choices":[{"index":0,' % (
            rid.encode(),
            b"chat.completion.chunk" if chat else b"text_completion",
            self.created,
            orjson.dumps(model),
        )
        self.prefix = b"data: " + head + (_CHAT_DELTA if chat else b'"text":"')

    def token_bytes(self, last: bool) -> bytes:
        """The next token's event (the chat stream's opening chunk before the first)."""
        w = WORDS[(self.word + self.sent) % len(WORDS)]
        self.sent += 1
        if self.chat:
            data = self.prefix + w + (_TAIL_CHAT_LAST if last else _TAIL_CHAT)
            return self.opening() + data if self.sent == 1 else data
        return self.prefix + w + (_TAIL_TEXT_LAST if last else _TAIL_TEXT)

    def closing_bytes(self) -> bytes:
        """What follows the last token: the usage event when asked for, then ``[DONE]``."""
        return self.usage_bytes() + DONE if self.include_usage else DONE

    def opening(self) -> bytes:
        """The chat stream's role-only first chunk (vLLM sends it with the first token)."""
        head = self.prefix[: -len(_CHAT_DELTA)]
        return (
            head + b'"delta":{"role":"assistant","content":""},"logprobs":null,'
            b'"finish_reason":null}]}\n\n'
        )

    def usage_bytes(self) -> bytes:
        usage = {
            "prompt_tokens": self.req.prompt_len,
            "total_tokens": self.req.prompt_len + self.sent,
            "completion_tokens": self.sent,
            "prompt_tokens_details": {"cached_tokens": self.req.cached},
        }
        body: dict[str, Any] = {
            "id": self.rid,
            "object": "chat.completion.chunk" if self.chat else "text_completion",
            "created": self.created,
            "model": "",
            "choices": [],
            "usage": usage,
        }
        return b"data: " + orjson.dumps(body) + b"\n\n"

    def full_body(self, model: str) -> bytes:
        """The non-streamed answer: one JSON body with the whole text and the usage."""
        n = self.req.out
        text = b"".join(WORDS[(self.word + i) % len(WORDS)] for i in range(n)).decode()
        usage = {
            "prompt_tokens": self.req.prompt_len,
            "total_tokens": self.req.prompt_len + n,
            "completion_tokens": n,
            "prompt_tokens_details": {"cached_tokens": self.req.cached},
        }
        if self.chat:
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": "length",
            }
        else:
            choice = {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": "length",
                "stop_reason": None,
            }
        body = {
            "id": self.rid,
            "object": "chat.completion" if self.chat else "text_completion",
            "created": self.created,
            "model": model,
            "choices": [choice],
            "usage": usage,
        }
        return orjson.dumps(body)
