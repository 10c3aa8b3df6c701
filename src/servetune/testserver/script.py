"""What the scripted test server does: its delays, chunking and injected faults."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


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
    fail_every: int = 0
    """Every Nth request is answered HTTP 500."""
    error_midstream_every: int = 0
    """Every Nth request streams half its tokens, then an error object."""
    disconnect_every: int = 0
    """Every Nth request streams half its tokens, then the connection is cut."""
    tokens_per_word: int = 1
    """How many tokens the server's tokenizer counts per whitespace-separated word."""
    drop_reused_connections: bool = False
    """Close a kept-alive connection, unanswered, when a second request arrives on it: the
    keep-alive race of servers that time out idle connections (llama-server does)."""
    one_write: bool = False
    """Render the whole response up front and write it at once (zero-cost server)."""
