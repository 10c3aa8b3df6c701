"""The measuring client: one streamed request in, one RequestRecord out.

Nothing raises out of :meth:`OpenAIClient.request`: non-2xx answers, refused or reset
connections, timeouts, error objects mid-stream and broken streams (cut, malformed) become
failed records with their reason and error class (``servetune.results.record.ERROR_CLASSES``);
cancellation (Ctrl-C, end of a --duration run) becomes a cancelled record. Whichever transport
carried the bytes, the same failure gets the same class: the transport says how the body
ended (normally, or by an exception classified here), the stream says whether it was whole.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson

from servetune.client.fasthttp import HTTPError
from servetune.client.payload import endpoint_path
from servetune.client.stream import StreamState, error_message
from servetune.client.transports import Transport
from servetune.errors import ConfigError
from servetune.results.record import ErrorClass, RequestRecord, class_of_status
from servetune.results.schema import Endpoint
from servetune.workload.tokens import TokenCounter


def normalize_base_url(base_url: str) -> str:
    """``http://h:p``, ``http://h:p/`` and ``http://h:p/v1/`` all become ``http://h:p/v1``;
    ``h:p`` means ``http://h:p``. Another scheme or a port that cannot be is a ConfigError."""
    url = base_url.strip().rstrip("/")
    if "://" in url and not url.lower().startswith(("http://", "https://")):
        raise ConfigError.over_fields(
            f"{{base_url}} {base_url!r} is not an http(s) URL",
            hint="e.g. {base_url}=http://127.0.0.1:8000/v1",
        )
    if not url.lower().startswith(("http://", "https://")):
        url = "http://" + url
    try:
        port = urlsplit(url).port
        host = urlsplit(url).hostname
    except ValueError:  # a port that is no number or out of 0-65535
        port, host = -1, None
    if port == -1 or not host:
        raise ConfigError.over_fields(
            f"{{base_url}} {base_url!r} is not a valid URL (host, or a port in 1-65535)",
            hint="e.g. {base_url}=http://127.0.0.1:8000/v1",
        )
    return url if url.endswith("/v1") else url + "/v1"


def describe_exception(exc: BaseException, timeout_s: float) -> str:
    """A short, stable failure reason (stable so that reasons can be counted)."""
    return classify_exception(exc, timeout_s)[1]


_HTTP_ERROR_CLASSES: tuple[tuple[str, ErrorClass], ...] = (
    ("cannot connect", "connection_refused"),
    ("disconnected", "connection_reset"),
    ("reset", "connection_reset"),
    ("closed", "connection_reset"),
    ("malformed", "protocol_error"),
    ("too large", "protocol_error"),
    ("invalid", "protocol_error"),
    ("unsolicited", "protocol_error"),
    ("unexpected", "protocol_error"),
)


def classify_exception(exc: BaseException, timeout_s: float) -> tuple[ErrorClass, str]:
    """(error class, short stable message) of a request that ended by an exception."""
    if isinstance(exc, HTTPError):
        msg = str(exc)
        kind = getattr(exc, "kind", None)  # a transport may say it outright
        if kind in ("connection_refused", "connection_reset", "protocol_error", "timeout"):
            return kind, msg
        low = msg.lower()
        for needle, cls in _HTTP_ERROR_CLASSES:
            if needle in low:
                return cls, msg
        return "other", msg
    if isinstance(exc, TimeoutError):
        return "timeout", f"timeout after {timeout_s:g} s"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return "connection_refused", f"cannot connect: {exc.os_error.strerror or exc.os_error}"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "connection_reset", "server disconnected"
    if isinstance(exc, aiohttp.ClientPayloadError):
        return "connection_reset", "connection reset mid-stream"
    if isinstance(exc, aiohttp.ClientResponseError):
        return "protocol_error", f"malformed HTTP response: {exc.message}"
    if isinstance(exc, ConnectionRefusedError):
        return "connection_refused", "cannot connect: connection refused"
    if isinstance(exc, (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)):
        return "connection_reset", "connection reset"
    if isinstance(exc, aiohttp.ClientOSError | OSError):
        return "other", f"{type(exc).__name__}: {getattr(exc, 'strerror', None) or exc}"
    return "other", f"{type(exc).__name__}: {exc}"


def http_failure(http_status: int, body: bytes) -> tuple[ErrorClass, str]:
    """(class, message) of a non-2xx answer, the message from its error body."""
    try:
        msg = error_message(orjson.loads(body))
    except orjson.JSONDecodeError:
        msg = body.decode("utf-8", "replace").strip()[:300]
    cls: ErrorClass = class_of_status(http_status) if http_status >= 400 else "protocol_error"
    if http_status < 400:
        msg = msg or "a redirect or other non-2xx answer, not followed"
    return cls, f"HTTP {http_status}: {msg}"


class OpenAIClient:
    """Sends streamed completions or chat requests and measures them."""

    def __init__(
        self,
        transport: Transport,
        endpoint: Endpoint,
        t0_ns: int,
        timeout_s: float = 600.0,
        tokenizer: TokenCounter | None = None,
        worker: int = 0,
    ) -> None:
        self.transport = transport
        self.path = endpoint_path(endpoint)
        self.chat = endpoint == "chat"
        self.t0_ns = t0_ns
        self.timeout_s = timeout_s
        self.tokenizer = tokenizer
        self.worker = worker

    def prepare(self, body: bytes, headers: bytes = b"") -> object:
        """What :meth:`request` sends; ``headers``: extra header lines (``Name: value\r\n``)."""
        return self.transport.prepare(self.path, body, headers)

    async def request(
        self,
        rid: int,
        prepared: object,
        planned_input_len: int,
        planned_output_len: int | None,
        scheduled_ns: int,
        eligible_ns: int,
        text_out: list[str] | None = None,
    ) -> RequestRecord:
        """Send one prepared request and return its record; never raises. ``text_out``: the
        generated text is appended to it (a session's next turn carries it)."""
        clock = time.perf_counter_ns
        state = StreamState(self.chat)
        status = "ok"
        error: str | None = None
        cls: ErrorClass | None = None
        http_status: int | None = None
        send_ns = clock()
        try:
            async with asyncio.timeout(self.timeout_s):
                http_status, err_body = await self.transport.send(prepared, state.feed)
            if http_status >= 300:
                status, cls, error = "failed", *http_failure(http_status, err_body)
            else:
                state.close(clock())
                cls, error = state.verdict()
                if cls is not None:
                    status = "failed"
        except asyncio.CancelledError:
            status, error = "cancelled", "cancelled by the client"
        except Exception as exc:  # every transport failure becomes a failed record
            status = "failed"
            cls, error = classify_exception(exc, self.timeout_s)
        end_ns = clock()
        t0 = self.t0_ns
        if text_out is not None:
            text_out.append(state.generated_text())
        return self._record(
            rid,
            state,
            status,
            (error, cls),
            http_status,
            planned_input_len,
            planned_output_len,
            (scheduled_ns - t0, eligible_ns - t0, send_ns - t0, end_ns - t0),
        )

    def _record(
        self,
        rid: int,
        st: StreamState,
        status: str,
        failure: tuple[str | None, ErrorClass | None],
        http_status: int | None,
        planned_in: int,
        planned_out: int | None,
        times: tuple[int, int, int, int],
    ) -> RequestRecord:
        t0 = self.t0_ns
        chunks = [c - t0 for c in st.chunk_ns]
        out_tokens, source = st.completion_tokens, "usage"
        # No usage, or a usage of 0 tokens beside generated text (some proxies fill usage with
        # zeros): count otherwise, as vLLM's bench does (`if not output_len:` → tokenize).
        if chunks and (out_tokens is None or (out_tokens == 0 and st.texts)):
            if self.tokenizer is not None and self.tokenizer.exact:
                out_tokens, source = self.tokenizer.count(st.generated_text()), "tokenizer"
            else:
                out_tokens, source = len(chunks), "chunks"
        scheduled, eligible, send, end = times
        fields: dict[str, Any] = {
            "id": rid,
            "worker": self.worker,
            "status": status,
            "error": failure[0],
            "error_class": failure[1],
            "http_status": http_status,
            "scheduled_ns": scheduled,
            "eligible_ns": eligible,
            "send_ns": send,
            "first_ns": chunks[0] if chunks else None,
            "last_ns": chunks[-1] if chunks else None,
            "end_ns": end,
            "chunk_ns": chunks,
            "chunk_tokens": st.chunk_tokens if st.usage_every_chunk and chunks else None,
            "planned_input_len": planned_in,
            "planned_output_len": planned_out,
            "prompt_tokens": st.prompt_tokens,
            "output_tokens": out_tokens,
            "tokens_source": source if out_tokens is not None else None,
            "finish_reason": st.finish_reason,
            "cached_tokens": st.cached_tokens,
        }
        return RequestRecord.model_construct(**fields)
