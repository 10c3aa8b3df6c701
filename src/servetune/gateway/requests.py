"""What a client sent: check the body before anything is reserved or forwarded, and count its
input tokens.

Every check answers a 4xx with an OpenAI-shaped error that says what was wrong — never a 5xx,
never a forward: a body that is not JSON, not an object (a string, list, number, null), has no
``model``, or has fields of the wrong type (``stream``, ``max_tokens``, ``n``, ``messages``,
``prompt``, ``input``).

Input tokens are counted with the served model's tokenizer when the group names one
(``tokenizer:``, a local folder or ``tokenizer.json``), else *estimated* with servetune's
word-piece counter (:class:`~servetune.workload.tokens.ApproxTokenizer`: a word of up to 7
characters or a punctuation mark is one token, a longer word one per 7 characters). Chat
templates add a few tokens per message that neither counts. The estimate decides only the
``max_input_tokens`` cap and the size of the reservation; the reservation is settled to the
engine's own count (``usage``) when the request ends. A chat's tool definitions (``tools``,
``functions``) and earlier turns' ``tool_calls`` are counted too (as their JSON text): the
chat template renders them into the prompt, so leaving them out would let a request pass the
input cap, and reserve less than it uses, by moving its text there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import orjson

from servetune.gateway.output_bounds import BoundError, Bounds, read_bounds
from servetune.http import Exchange
from servetune.workload.tokens import ApproxTokenizer, TokenCounter, load_tokenizer

Endpoint = Literal["chat", "completions", "embeddings"]
ENDPOINTS: dict[str, Endpoint] = {
    "/v1/chat/completions": "chat",
    "/v1/completions": "completions",
    "/v1/embeddings": "embeddings",
}


class BadRequest(Exception):
    def __init__(self, message: str, status: int = 400, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.param = param


def error_body(message: str, type_: str, code: str | int | None, param: str | None = None) -> bytes:
    """An OpenAI-shaped error: ``{"error": {"message", "type", "param", "code"}}``."""
    return orjson.dumps(
        {"error": {"message": message, "type": type_, "param": param, "code": code}}
    )


AMBIGUOUS = b""
"""What :func:`presented_key` returns for a request with more than one key (never a key)."""


def presented_key(ex: Exchange) -> bytes | None:
    """The API key the client sent: ``Authorization: Bearer KEY``, else ``x-api-key`` or
    ``api-key``; None when there is none (or the Authorization scheme is not Bearer);
    :data:`AMBIGUOUS` when it sent two ``Authorization`` headers, or two key headers with
    different keys — which one a proxy in front or an engine behind reads is anyone's guess,
    so the request is refused rather than the first one taken."""
    auth: bytes | None = None
    other: bytes | None = None
    for k, v in ex.headers:
        if k == b"authorization":
            if auth is not None:
                return AMBIGUOUS
            auth = v
        elif k == b"x-api-key" or k == b"api-key":
            v = v.strip()
            if other is not None and v != other:
                return AMBIGUOUS
            other = v
    if auth is not None:
        scheme, _, value = auth.partition(b" ")
        if scheme.lower() != b"bearer" or not value.strip():
            return None
        key = value.strip()
        return AMBIGUOUS if other and other != key else key
    return other or None


@dataclass
class Parsed:
    body: dict[str, Any]
    endpoint: Endpoint
    model: str
    stream: bool
    max_tokens: int | None
    """The tightest output length asked for, whatever its field's name (``max_tokens``,
    ``max_completion_tokens``, ``n_predict``, ``max_new_tokens``:
    :mod:`~servetune.gateway.output_bounds`); None when none was given."""
    choices: int
    """Sequences generated, each up to max_tokens: ``n`` (or ``best_of`` when larger), times
    the number of prompts of a batched completions request (a list of strings or of token-id
    lists: the engine completes each one)."""
    usage_asked: bool
    """The client asked for ``stream_options.include_usage``."""
    bounds: Bounds
    """Every output bound the body holds (rewritten to one before it is forwarded)."""


def parse_body(raw: bytes, endpoint: Endpoint) -> Parsed:
    if not raw:
        raise BadRequest("the request has no body: send a JSON object")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"the body is not valid JSON ({exc.msg} at position {exc.pos})") from None
    if not isinstance(body, dict):
        kind = "null" if body is None else type(body).__name__
        raise BadRequest(f"the body must be a JSON object, got {kind}")
    model = body.get("model")
    if not isinstance(model, str) or not model.strip():
        raise BadRequest("'model' is required: the served model's name", param="model")
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise BadRequest("'stream' must be true or false", param="stream")
    opts = body.get("stream_options")
    if opts is not None and not isinstance(opts, dict):
        raise BadRequest("'stream_options' must be an object", param="stream_options")
    usage_asked = bool(opts.get("include_usage")) if isinstance(opts, dict) else False
    try:
        bounds = read_bounds(body)
    except BoundError as exc:
        raise BadRequest(exc.message, param=exc.param) from None
    if endpoint == "chat":
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs:
            raise BadRequest("'messages' must be a non-empty list", param="messages")
        if not all(isinstance(m, dict) for m in msgs):
            raise BadRequest("each message must be an object", param="messages")
    elif endpoint == "completions":
        if not _prompt_ok(body.get("prompt")):
            raise BadRequest(
                "'prompt' must be a string, a list of strings, or token ids", param="prompt"
            )
    else:
        if not _prompt_ok(body.get("input")):
            raise BadRequest(
                "'input' must be a string, a list of strings, or token ids", param="input"
            )
    choices = bounds.choices
    if endpoint == "completions":
        choices *= _prompts_in(body["prompt"])
    return Parsed(body, endpoint, model, stream, bounds.max_tokens, choices, usage_asked, bounds)


def _prompts_in(p: Any) -> int:
    """Prompts in a checked ``prompt``: a string or one list of token ids is one; a list of
    strings or of token-id lists is one per element."""
    if isinstance(p, list) and not isinstance(p[0], int):
        return len(p)
    return 1


def _prompt_ok(p: Any) -> bool:
    if isinstance(p, str):
        return True
    if isinstance(p, list) and p:
        if all(isinstance(x, str) for x in p):
            return True
        if all(isinstance(x, int) and not isinstance(x, bool) for x in p):
            return True
        return all(
            isinstance(x, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in x)
            for x in p
        )
    return False


_RENDERED = ("tools", "functions")
"""Chat request fields other than the messages that the engine's chat template puts in the
prompt."""


class InputCounter:
    """Prompt tokens of a request: exact with a tokenizer, else the documented estimate."""

    def __init__(self, tokenizer: str | None = None) -> None:
        self.counter: TokenCounter = load_tokenizer(tokenizer) if tokenizer else ApproxTokenizer()
        self.exact = tokenizer is not None

    def text(self, text: str) -> int:
        """Tokens of a piece of text (the output estimate of a stream without usage too)."""
        return self.counter.count(text) if text else 0

    def _json(self, value: Any) -> int:
        """A JSON value the chat template renders into the prompt (tool definitions, tool
        calls): counted as its JSON text."""
        try:
            return self.text(orjson.dumps(value).decode())
        except TypeError:
            return 0

    def _prompt(self, p: Any) -> int:
        if isinstance(p, str):
            return self.text(p)
        if isinstance(p, list):
            if p and all(isinstance(x, int) for x in p):
                return len(p)
            return sum(self._prompt(x) for x in p)
        return 0

    def count(self, parsed: Parsed) -> int:
        body = parsed.body
        if parsed.endpoint == "chat":
            total = 0
            for m in body["messages"]:
                content = m.get("content")
                if isinstance(content, str):
                    total += self.text(content)
                elif isinstance(content, list):
                    for part in content:
                        if isinstance(part, dict) and isinstance(part.get("text"), str):
                            total += self.text(part["text"])
                calls = m.get("tool_calls")
                if calls:  # an assistant turn's calls: rendered into the prompt
                    total += self._json(calls)
            for key in _RENDERED:  # tool and function definitions: rendered into the prompt
                extra = body.get(key)
                if extra:
                    total += self._json(extra)
            return total
        key = "prompt" if parsed.endpoint == "completions" else "input"
        return self._prompt(body.get(key))
