"""A scripted OpenAI-compatible server: known delays, injected faults.

It exists to test the measurement chain against delays we know, and to be a server whose
per-request cost is far below the client's (``one_write``: pre-rendered SSE bytes) for the
client-capacity benchmark. Run it as a process: ``python -m servetune.testserver --port 0``;
it prints ``READY <port>`` once it listens.
"""

from __future__ import annotations

import asyncio
import gzip
import time
from collections.abc import Awaitable
from typing import Any

import orjson

from servetune.http import Exchange, HTTPServer, Router, ServerConnection
from servetune.testserver import faults
from servetune.testserver.script import Script

_WORDS = [f" w{i}" for i in range(64)]


class _Counters:
    def __init__(self) -> None:
        self.requests = 0
        self.completed = 0
        self.aborted = 0
        self.generated = 0
        self.prompt = 0
        self.running = 0


_NO_CACHE = [(b"Cache-Control", b"no-cache")]


def _count_requests(conn: ServerConnection) -> None:
    conn.tag = [0]  # generation requests served on this connection


class ScriptedServer:
    """Serves one :class:`Script` on 127.0.0.1 (HTTP: :mod:`servetune.http`)."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.counters = _Counters()
        self.http = HTTPServer(_router(self), on_connect=_count_requests)
        self.port = 0
        sep = b"\r\n\r\n" if script.crlf else b"\n\n"
        self._sep = sep
        self._data = b"data: " if script.data_space else b"data:"
        self._prerendered: dict[tuple[bool, int, int], bytes] = {}
        self.writes: list[tuple[int, list[int]]] = []
        """(arrival, the time of each content write) of each stream, with ``record_writes``."""
        self.seen: list[dict[str, Any]] = []
        """Each generation request's headers, ``user`` and prompt, with ``record_writes``."""

    async def start(self, port: int = 0) -> int:
        self.port = await self.http.start("127.0.0.1", port)
        return self.port

    async def close(self) -> None:
        await self.http.drain(1.0)

    # -- read-outs ------------------------------------------------------------------------
    def models(self, ex: Exchange) -> None:
        s = self.script
        ex.respond_json(
            200,
            {
                "object": "list",
                "data": [{"id": s.model, "object": "model", "max_model_len": s.max_model_len}],
            },
        )

    def tokenize(self, ex: Exchange) -> None:
        s = self.script
        req = orjson.loads(ex.body or b"{}")
        text = str(req.get("prompt", req.get("content", "")))
        n = len(text.split()) * s.tokens_per_word
        body = {"count": n, "max_model_len": s.max_model_len, "tokens": list(range(n))}
        ex.respond_json(200, body)

    def metrics(self, ex: Exchange) -> None:
        c = self.counters
        page = (
            f"scripted:requests_total {c.requests}\nscripted:completed_total {c.completed}\n"
            f"scripted:aborted_total {c.aborted}\nscripted:running {c.running}\n"
        ).encode()
        ex.respond(200, page, b"text/plain")

    def writes_json(self, ex: Exchange) -> None:
        ex.respond_json(200, [{"arrival_ns": a, "write_ns": w} for a, w in self.writes])

    def requests_json(self, ex: Exchange) -> None:
        ex.respond_json(200, self.seen)

    # -- generation -----------------------------------------------------------------------
    def generate(self, ex: Exchange) -> Awaitable[None] | None:
        served = ex.conn.tag
        served[0] += 1
        if served[0] > 1 and self.script.drop_reused_connections:
            ex.conn.close()  # unanswered: the keep-alive race of an idle time-out
            return None
        return self._generate(ex, ex.path.endswith("chat/completions"))

    async def _generate(self, ex: Exchange, chat: bool) -> None:
        s, c = self.script, self.counters
        arrival = time.perf_counter()
        c.requests += 1
        nth = c.requests
        try:
            req = orjson.loads(ex.body)
        except orjson.JSONDecodeError:
            ex.error(400, "body is not JSON")
            return
        if req.get("model") != s.model:
            ex.error(404, f"The model `{req.get('model')}` does not exist.")
            return
        if s.redirect_to is not None and ex.target != s.redirect_to.encode():
            ex.respond(307, b"", None, [(b"Location", s.redirect_to.encode())])
            return
        refused = faults.refusal(s, nth)
        if refused is not None:
            status, headers, body = refused
            ex.respond(status, body, b"application/json", headers)
            return
        early = faults.before_head(s, nth)
        if early == "reset":
            ex.abort()
            return
        if early is not None:
            await asyncio.sleep(early)
        if chat:
            prompt = " ".join(str(m.get("content", "")) for m in req.get("messages") or [])
        else:
            prompt = str(req.get("prompt", ""))
        if s.record_writes:
            self.seen.append(
                {
                    "headers": {k.decode(): v.decode("latin-1") for k, v in ex.headers},
                    "user": req.get("user"),
                    "prompt": prompt,
                    "messages": req.get("messages"),
                }
            )
        p_tokens = len(prompt.split()) * s.tokens_per_word
        n = int(req.get("max_tokens") or req.get("max_completion_tokens") or 16)
        if p_tokens + n > s.max_model_len:
            msg = (
                f"This model's maximum context length is {s.max_model_len} tokens. However, "
                f"you requested {p_tokens + n} tokens ({p_tokens} in the messages, {n} in the "
                "completion)."
            )
            ex.error(400, msg)
            return
        c.prompt += p_tokens
        c.running += 1
        try:
            await self._stream(ex, chat, nth, p_tokens, n, arrival)
        finally:
            c.running -= 1

    async def _stream(
        self, ex: Exchange, chat: bool, nth: int, p_tokens: int, n: int, arrival: float
    ) -> None:
        s, c = self.script, self.counters
        if s.one_write and not faults.alters_streams(s):
            key = (chat, n, p_tokens)
            data = self._prerendered.get(key)
            if data is None:
                parts = [self.role_event()] if chat and s.role_chunk else []
                parts += self.chunks(chat, p_tokens, n)
                data = b"".join(parts) + self.tail(p_tokens, n)
                self._prerendered[key] = data
            if s.ttft_ms:
                await asyncio.sleep(s.ttft_ms / 1000)
            ex.start(200, b"text/event-stream", _NO_CACHE, flush=False)
            if s.record_writes:  # stamped before the write: the bytes cannot be older
                chunks = -(-n // s.tokens_per_chunk)
                self.writes.append((int(arrival * 1e9), [time.perf_counter_ns()] * chunks))
            ex.end(data)  # head and body in one write
            c.completed += 1
            c.generated += n
            return
        shape = faults.shape_stream(self, chat, nth, p_tokens, n)
        if shape.raw_body is not None:  # not a stream at all
            ex.respond(200, shape.raw_body, b"application/json")
            c.completed += 1
            return
        if s.gzip and accepts_gzip(ex.header(b"accept-encoding")):
            if s.ttft_ms:
                await asyncio.sleep(s.ttft_ms / 1000)
            parts = [self.role_event()] if chat and s.role_chunk else []
            body = b"".join([*parts, *shape.events, shape.tail])
            ex.respond(200, gzip.compress(body), b"text/event-stream", _GZIP)
            c.completed += 1
            c.generated += n
            return
        if s.close_framing:
            ex.http10 = True  # the body ends when the connection closes (no chunked encoding)
        ex.start(200, b"text/event-stream", _NO_CACHE)
        loop = asyncio.get_running_loop()
        start = loop.time() - (time.perf_counter() - arrival)
        stamps: list[int] | None = [] if s.record_writes else None
        held = b""
        try:
            for i, ev in enumerate(shape.events):
                due = start + (s.ttft_ms + i * s.tokens_per_chunk * s.tpot_ms) / 1000
                delay = due - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                if s.keepalive_comments:
                    ex.send(b": ping" + self._sep)
                if i == 0 and chat and s.role_chunk:
                    # vLLM sends the role chunk with the first engine output, not on arrival.
                    ev = self.role_event() + ev
                if stamps is not None:  # before the write: the bytes cannot be older
                    stamps.append(time.perf_counter_ns())
                if (i + 1) % s.events_per_write and i + 1 < len(shape.events):
                    held += ev  # goes out with the next events, in one write
                    continue
                ex.send(held + ev)
                held = b""
            if shape.ending == "reset":
                ex.abort()
            else:
                ex.end(shape.tail)  # "end" has no tail: the HTTP body ends, the stream did not
            if shape.aborted:
                c.aborted += 1
            else:
                c.completed += 1
                c.generated += n
                if stamps is not None:
                    self.writes.append((int(arrival * 1e9), stamps))
        except asyncio.CancelledError:  # the client went away
            c.aborted += 1
            raise

    # -- rendering -----------------------------------------------------------------------
    def event(self, obj: Any) -> bytes:
        return self._data + orjson.dumps(obj) + self._sep

    def chunk_event(
        self, chat: bool, i: int, n_tokens: int, finish: str | None, usage: dict[str, int] | None
    ) -> bytes:
        text = "".join(
            ""
            if self.script.empty_text_every and (i + k + 1) % self.script.empty_text_every == 0
            else _WORDS[(i + k) % 64]
            for k in range(n_tokens)
        )
        choice: dict[str, Any]
        if chat:
            choice = {"index": 0, "delta": {"content": text}, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": text, "finish_reason": finish}
        obj: dict[str, Any] = {
            "id": "cmpl-1",
            "object": "chunk",
            "model": self.script.model,
            "choices": [choice],
        }
        if usage is not None:
            obj["usage"] = usage
        return self.event(obj)

    def chunks(self, chat: bool, prompt_tokens: int, n: int) -> list[bytes]:
        """The content events of a response of ``n`` tokens (role chunk excluded)."""
        s = self.script
        out = []
        i = 0
        while i < n:
            k = min(s.tokens_per_chunk, n - i)
            last = i + k >= n
            usage = None
            if last and s.send_usage and s.usage_in_last_chunk:
                usage = {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": n,
                    "total_tokens": prompt_tokens + n,
                }
            out.append(self.chunk_event(chat, i, k, "length" if last else None, usage))
            i += k
        return out

    def tail(self, prompt_tokens: int, n: int) -> bytes:
        s = self.script
        data = b""
        if s.send_usage and not s.usage_in_last_chunk:
            data += self.event(
                {
                    "id": "cmpl-1",
                    "object": "chunk",
                    "model": s.model,
                    "choices": [],
                    "usage": {
                        "prompt_tokens": 0 if s.zero_usage else prompt_tokens,
                        "completion_tokens": 0 if s.zero_usage else n,
                        "total_tokens": 0 if s.zero_usage else prompt_tokens + n,
                    },
                }
            )
        if s.send_done:
            data += self._data + b"[DONE]" + self._sep
        return data

    def role_event(self) -> bytes:
        return self.event(
            {
                "id": "cmpl-1",
                "object": "chunk",
                "model": self.script.model,
                "choices": [
                    {
                        "index": 0,
                        "delta": {"role": "assistant", "content": ""},
                        "finish_reason": None,
                    }
                ],
            }
        )


_GZIP = ((b"Content-Encoding", b"gzip"),)


def accepts_gzip(accept_encoding: bytes | None) -> bool:
    """Whether a request's ``Accept-Encoding`` lets the answer be gzipped: none at all means
    any coding (RFC 9110 §12.5.3); else gzip must be listed, and not with ``q=0``."""
    if accept_encoding is None:
        return True
    for item in accept_encoding.lower().split(b","):
        coding, _, params = item.strip().partition(b";")
        if coding.strip() in (b"gzip", b"*"):
            return params.replace(b" ", b"") not in (b"q=0", b"q=0.0", b"q=0.00", b"q=0.000")
    return False


def _router(srv: ScriptedServer) -> Router:
    router = Router()
    router.get("/health", lambda ex: ex.respond(200, b"", None))
    router.get("/v1/models", srv.models)
    router.post("/tokenize", srv.tokenize)
    router.get("/metrics", srv.metrics)
    router.get("/scripted/writes", srv.writes_json)
    router.get("/scripted/requests", srv.requests_json)
    router.post("/v1/completions", srv.generate)
    router.post("/v1/chat/completions", srv.generate)
    return router


async def serve_forever(script: Script, port: int = 0) -> None:
    server = ScriptedServer(script)
    bound = await server.start(port)
    print(f"READY {bound}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await server.close()
