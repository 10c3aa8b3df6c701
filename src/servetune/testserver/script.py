"""What the scripted test server does: its delays, chunking and injected faults."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

MalformedKind = Literal[
    "garbage_line", "invalid_json", "truncated_json", "non_object", "bad_choices", "not_sse"
]


class Script(BaseModel):
    """Behaviour of the scripted OpenAI-compatible server (all delays in milliseconds)."""

    model_config = ConfigDict(extra="forbid")

    model: str = "scripted-model"
    ttft_ms: float = 0.0
    """Delay from the request's arrival to the first content chunk."""
    tpot_ms: float = 0.0
    """Delay between consecutive tokens."""
    tokens_per_chunk: int = 1
    max_model_len: int = 32768
    send_usage: bool = True
    zero_usage: bool = False
    """The usage chunk reports 0 tokens (as proxies that fill it with zeros do)."""
    usage_in_last_chunk: bool = False
    """llama.cpp style: usage on the last content chunk instead of a separate chunk."""
    send_done: bool = True
    role_chunk: bool = True
    """Chat streams open with a role-only chunk, as vLLM's do."""
    empty_text_every: int = 0
    """Every Nth token streams an empty text (a partial UTF-8 character on real servers)."""
    keepalive_comments: bool = False
    """Interleave ``: ping`` comments between events."""
    crlf: bool = False
    data_space: bool = True
    """``data: {…}`` as vLLM writes it; False: ``data:{…}`` (no space after the colon, as
    TGI's server writes it; the SSE standard allows both)."""
    fail_every: int = 0
    """Every Nth request is answered ``fail_status`` (1 = every request)."""
    fail_status: int = 500
    """The HTTP status of those answers: 500, 503, 429 (with ``Retry-After``), 400, …"""
    reset_before_head_every: int = 0
    """Every Nth request is answered nothing: the connection is reset before the response head
    (an engine process that crashed or was killed)."""
    stall_head_every: int = 0
    """Every Nth request gets its response head only after ``stall_head_ms`` (an engine that
    hangs: a proxy's first-byte deadline passes first)."""
    stall_head_ms: float = 0.0
    error_midstream_every: int = 0
    """Every Nth request streams half its tokens, then an error object."""
    error_midstream_code: int = 500
    """The ``code`` of that error object."""
    disconnect_every: int = 0
    """Every Nth request streams half its tokens, then the connection is reset."""
    truncate_every: int = 0
    """Every Nth request streams ``truncate_at`` tokens (default half), then ends its body
    properly at the HTTP level: no finish_reason, no usage, no ``[DONE]``."""
    truncate_at: int | None = None
    malformed_every: int = 0
    """Every Nth request carries one ``malformed_kind`` event in the middle of its stream."""
    malformed_kind: MalformedKind = "invalid_json"
    """garbage_line: a line that is not SSE; invalid_json: ``data: {not json``;
    truncated_json: a chunk's JSON cut mid-way (then the stream goes on); non_object:
    ``data: [1, 2]``; bad_choices: ``choices`` a string; not_sse: the whole body is one JSON
    completion instead of a stream."""
    short_output_every: int = 0
    """Every Nth request stops at half its max_tokens with finish_reason "stop" (an EOS):
    a whole, valid stream that is shorter than asked."""
    gzip: bool = False
    """Compress streamed bodies (``Content-Encoding: gzip``) whenever the request allows it: an
    ``Accept-Encoding`` that lists gzip, or none at all (RFC 9110: then any coding will do), as
    a compressing proxy in front of a server does."""
    redirect_to: str | None = None
    """Answer every generation request ``307 Temporary Redirect`` to this location (a request
    target, e.g. ``/v1/completions?moved=1``), which is then served as usual."""
    events_per_write: int = 1
    """Write this many content events at once (the later ones held back until the last is
    due), as a server with a stream interval above 1 does: the chunks arrive together."""
    abort_every: int = 0
    """Every Nth request stops at half its max_tokens with finish_reason ``abort_reason``, then
    usage and ``[DONE]``: a well-formed stream of a request the engine gave up on."""
    abort_reason: str = "abort"
    """vLLM's ``abort`` (the engine aborted the request) or ``error`` (a request-level error)."""
    close_framing: bool = False
    """Frame streamed bodies by closing the connection (HTTP/1.0 style, no chunked encoding)."""
    tokens_per_word: int = 1
    """How many tokens the server's tokenizer counts per whitespace-separated word."""
    drop_reused_connections: bool = False
    """Close a kept-alive connection, unanswered, when a second request arrives on it: the
    keep-alive race of servers that time out idle connections (llama-server does)."""
    one_write: bool = False
    """Render the whole response up front and write it at once (zero-cost server)."""
    record_writes: bool = False
    """Keep each stream's arrival and the time of each content write (CLOCK_MONOTONIC ns, the
    clock of ``time.perf_counter_ns`` and of a run's records), served at ``GET
    /scripted/writes``: what the server really did, for checks that hold on a loaded box; and
    each generation request's headers, ``user`` field and prompt, at ``GET /scripted/requests``."""
