"""RequestRecord: what one request did, as written to ``requests.jsonl``.

All times are integer nanoseconds on the run's shared monotonic clock
(``time.perf_counter_ns()``), measured from the run's start (``t0``), so records from several
worker processes line up. Derived latencies follow the metric contract in ``docs/metrics.md``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

Status = Literal["ok", "failed", "cancelled"]
TokenSource = Literal["usage", "tokenizer", "chunks", "sim"]
ErrorClass = Literal[
    "server_error",
    "rate_limited",
    "client_error",
    "connection_refused",
    "connection_reset",
    "timeout",
    "truncated",
    "malformed_event",
    "no_output",
    "protocol_error",
    "other",
]

ERROR_CLASSES: dict[str, str] = {
    "server_error": "the server answered HTTP 5xx, sent an error object mid-stream, or ended "
    "the stream with finish_reason abort or error (the engine gave up on the request)",
    "rate_limited": "the server answered HTTP 429 (or an error object with code 429)",
    "client_error": "the server refused the request: HTTP 4xx other than 429 (a bad request, "
    "an unknown model, a prompt beyond max_model_len, a missing API key)",
    "connection_refused": "no connection could be made (refused, unreachable, DNS)",
    "connection_reset": "the connection closed or was reset before the response ended",
    "timeout": "no complete response within --request-timeout",
    "truncated": "the stream ended cleanly at the HTTP level but with neither a finish_reason "
    "nor [DONE]: the response was cut",
    "malformed_event": "an SSE event of the stream did not parse (not SSE, invalid or truncated "
    "JSON, not a JSON object, a choices list of the wrong shape)",
    "no_output": "the stream ended properly but carried no content chunk",
    "protocol_error": "the HTTP response itself was malformed (status line, chunked encoding, "
    "headers too large)",
    "other": "any other client-side failure (the message says which)",
}
"""Why a request failed, one class each: counted in ``run.json`` and the printed summary."""

NS_PER_MS = 1_000_000


class RequestRecord(BaseModel):
    """One request, from its planned send time to the end of its stream."""

    model_config = ConfigDict(extra="ignore")

    id: int
    """Index of the request in the run's plan."""
    worker: int = 0
    status: Status
    error: str | None = None
    error_class: ErrorClass | None = None
    """Why a failed request failed (:data:`ERROR_CLASSES`); None when ok or cancelled."""
    http_status: int | None = None

    scheduled_ns: int
    """When the plan wanted the request sent."""
    eligible_ns: int
    """When the concurrency limiter released it (== scheduled_ns without a cap)."""
    send_ns: int
    """When the request left the client."""
    first_ns: int | None = None
    """First SSE chunk that carries a generated token (``choices`` non-empty)."""
    last_ns: int | None = None
    """Last SSE chunk that carries a generated token."""
    end_ns: int
    """When the response ended (stream closed, error or cancellation)."""

    chunk_ns: list[int] = []
    """Arrival of every content chunk, first included (run clock)."""
    chunk_tokens: list[int] | None = None
    """Tokens carried by each chunk, when the server tells (continuous usage stats)."""

    planned_input_len: int
    planned_output_len: int | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    tokens_source: TokenSource | None = None
    finish_reason: str | None = None
    cached_tokens: int | None = None
    """Prompt tokens the server served from its prefix cache, as its answer said
    (``usage.prompt_tokens_details.cached_tokens``: vLLM with --enable-prompt-tokens-details,
    SGLang, the simulated engine); None when it did not say."""

    session: str | None = None
    """The session this request belongs to (sent as the session header and ``user``)."""
    turn: int | None = None
    """Its turn in the session, from 1."""
    session_turns: int | None = None
    """Turns the session was planned with (a session whose records stop short ended early)."""
    dropped_turns: int | None = None
    """Earlier exchanges the client left out of this prompt to fit its context cap."""

    # --- derived figures (milliseconds) -------------------------------------------------
    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def ttft_ms(self) -> float | None:
        return None if self.first_ns is None else (self.first_ns - self.send_ns) / NS_PER_MS

    @property
    def e2e_ms(self) -> float | None:
        return None if self.last_ns is None else (self.last_ns - self.send_ns) / NS_PER_MS

    @property
    def tpot_ms(self) -> float | None:
        """(E2E − TTFT) / (output_tokens − 1), vLLM's definition; None for n ≤ 1."""
        n = self.output_tokens
        if n is None or n <= 1 or self.first_ns is None or self.last_ns is None:
            return None
        return (self.last_ns - self.first_ns) / NS_PER_MS / (n - 1)

    @property
    def ttft_from_scheduled_ms(self) -> float | None:
        return None if self.first_ns is None else (self.first_ns - self.scheduled_ns) / NS_PER_MS

    @property
    def e2e_from_scheduled_ms(self) -> float | None:
        return None if self.last_ns is None else (self.last_ns - self.scheduled_ns) / NS_PER_MS

    @property
    def send_lag_ms(self) -> float:
        """Client lateness: send − eligible (time the client itself was late)."""
        return (self.send_ns - self.eligible_ns) / NS_PER_MS

    @property
    def queue_delay_ms(self) -> float:
        """Client queue delay: send − scheduled (limiter wait plus client lateness)."""
        return (self.send_ns - self.scheduled_ns) / NS_PER_MS

    @property
    def failure_class(self) -> str | None:
        """The record's error class; for records written before classes existed, inferred
        from the message (:func:`classify_error`)."""
        if self.status != "failed":
            return None
        return self.error_class or classify_error(self.error, self.http_status)

    def itl_ms(self) -> list[float]:
        """Gaps between consecutive content chunks (one gap per chunk, whatever it carries)."""
        c = self.chunk_ns
        return [(c[i] - c[i - 1]) / NS_PER_MS for i in range(1, len(c))]


def class_of_status(code: int) -> ErrorClass:
    """The error class of an HTTP status (or of an error object's ``code``) of 400 and up."""
    if code == 429:
        return "rate_limited"
    if 400 <= code < 500:
        return "client_error"
    return "server_error"


_MESSAGE_CLASSES: tuple[tuple[tuple[str, ...], ErrorClass], ...] = (
    (("timeout", "timed out"), "timeout"),
    (
        ("cannot connect", "connection refused", "unreachable", "name or service"),
        "connection_refused",
    ),
    (("reset", "disconnected", "connection lost", "broken pipe", "eof"), "connection_reset"),
    (("truncated", "ended without"), "truncated"),
    (("malformed event", "malformed sse", "not valid json"), "malformed_event"),
    (("no token", "no content"), "no_output"),
    (("malformed http", "chunked encoding", "headers too large"), "protocol_error"),
    (("mid-stream",), "server_error"),
)


def classify_error(error: str | None, http_status: int | None = None) -> ErrorClass:
    """The class of a failure known only by its message and HTTP status (older records)."""
    if http_status is not None and http_status >= 400:
        return class_of_status(http_status)
    text = (error or "").lower()
    if text.startswith("http "):
        try:
            return class_of_status(int(text[5:8]))
        except ValueError:
            pass
    for needles, cls in _MESSAGE_CLASSES:
        if any(n in text for n in needles):
            return cls
    return "other"
