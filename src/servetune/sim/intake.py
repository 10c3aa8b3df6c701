"""What a generation request asks the simulated engine for, checked as vLLM checks it.

:func:`json_object` reads the body; :func:`read_request` turns an OpenAI
``/v1/completions`` or ``/v1/chat/completions`` body into an :class:`Ask` (prompt length and
pieces, ``max_tokens``, streaming options) or a :class:`Refusal` with vLLM's status, message
and error type: an unknown model (404), a ``max_tokens`` that is not a positive integer, a
prompt plus ``max_tokens`` beyond ``max_model_len`` (400, vLLM's wording). Prompts are counted
with the approximate counter of :mod:`servetune.workload.tokens` (one word or punctuation mark
≈ one token); a prompt given as token ids counts its ids. :func:`block_hashes` chains the
prompt's full KV blocks for the prefix cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from servetune.workload.tokens import approx_count, word_pieces


@dataclass(frozen=True)
class Ask:
    """An accepted generation request."""

    chat: bool
    prompt_len: int
    pieces: list[str]
    """What the prompt is made of (words or token ids), for the prefix-cache hashes."""
    max_tokens: int
    stream: bool
    include_usage: bool


@dataclass(frozen=True)
class Refusal:
    """A request vLLM would refuse: the HTTP status, message and error type."""

    status: int
    message: str
    type: str


def json_object(raw: bytes) -> dict[str, Any] | Refusal:
    """A request body as a JSON object (an empty body is ``{}``), or the 400 vLLM answers."""
    try:
        body = orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError as exc:
        return Refusal(400, f"invalid JSON body: {exc}", "BadRequestError")
    if not isinstance(body, dict):
        return Refusal(400, "invalid JSON body: the body must be a JSON object", "BadRequestError")
    return body


def prompt_pieces(body: dict[str, Any], chat: bool) -> tuple[int, list[str]]:
    """The prompt's token count and pieces (the messages' text joined, for chat)."""
    if chat:
        parts: list[str] = []
        for m in body.get("messages") or []:
            c = m.get("content") if isinstance(m, dict) else None
            if isinstance(c, str):
                parts.append(c)
            elif isinstance(c, list):
                parts.extend(str(x.get("text", "")) for x in c if isinstance(x, dict))
        text = "\n".join(parts)
    else:
        p = body.get("prompt", "")
        if isinstance(p, list) and p and isinstance(p[0], int):
            return len(p), [str(x) for x in p]
        if isinstance(p, list):
            p = p[0] if p else ""
            if isinstance(p, list):
                return len(p), [str(x) for x in p]
        text = str(p)
    pieces = word_pieces(text)
    return approx_count(pieces), pieces


def too_long_message(n_prompt: int, max_tokens: int, max_model_len: int, chat: bool) -> str:
    """vLLM's refusal of a request past the context length (the words its API server uses)."""
    what = "messages" if chat else "prompt"
    return (
        f"This model's maximum context length is {max_model_len} tokens. However, you "
        f"requested {n_prompt + max_tokens} tokens ({n_prompt} in the {what}, "
        f"{max_tokens} in the completion). Please reduce the length of the {what} "
        "or completion."
    )


def read_request(
    body: dict[str, Any], chat: bool, names: set[str], max_model_len: int
) -> Ask | Refusal:
    """Check a generation request against the served names and the context length."""
    model = body.get("model")
    if model is not None and model not in names:
        return Refusal(404, f"The model `{model}` does not exist.", "NotFoundError")
    n_prompt, pieces = prompt_pieces(body, chat)
    mt = body.get("max_completion_tokens") if chat else None
    max_tokens = mt if mt is not None else body.get("max_tokens")
    if max_tokens is None:
        max_tokens = max(1, max_model_len - n_prompt)
    try:
        max_tokens = int(max_tokens)
    except (TypeError, ValueError):
        return Refusal(
            400, f"max_tokens must be an integer (got {max_tokens!r})", "BadRequestError"
        )
    if max_tokens < 1:
        return Refusal(400, f"max_tokens must be at least 1, got {max_tokens}.", "BadRequestError")
    if n_prompt + max_tokens > max_model_len:
        return Refusal(
            400, too_long_message(n_prompt, max_tokens, max_model_len, chat), "BadRequestError"
        )
    stream = bool(body.get("stream", False))
    opts = body.get("stream_options")
    if not isinstance(opts, dict):
        opts = {}
    include_usage = bool(opts.get("include_usage", False)) if stream else False
    return Ask(chat, max(1, n_prompt), pieces, max_tokens, stream, include_usage)


def block_hashes(pieces: list[str], block_size: int, h0: int = 0) -> tuple[int, ...]:
    """A chained hash per full block of ``block_size`` pieces (the prefix cache's keys);
    ``h0``: the hash of the block before the first (to continue a chain)."""
    out = []
    h = h0
    for i in range(len(pieces) // block_size):
        h = hash((h, tuple(pieces[i * block_size : (i + 1) * block_size])))
        out.append(h)
    return tuple(out)
