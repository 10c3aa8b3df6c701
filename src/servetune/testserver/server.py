"""A scripted OpenAI-compatible server on raw asyncio: known delays, injected faults.

It exists to test the measurement chain against delays we know, and to be a server whose
per-request cost is far below the client's (``one_write``: pre-rendered SSE bytes) for the
client-capacity benchmark. Run it as a process: ``python -m servetune.testserver --port 0``;
it prints ``READY <port>`` once it listens.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson

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


def _chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class ScriptedServer:
    """Serves one :class:`Script` on 127.0.0.1."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.counters = _Counters()
        self._server: asyncio.base_events.Server | None = None
        self.port = 0
        sep = b"\r\n\r\n" if script.crlf else b"\n\n"
        self._sep = sep
        self._prerendered: dict[tuple[bool, int, int], bytes] = {}

    async def start(self, port: int = 0) -> int:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _Conn(self), "127.0.0.1", port, backlog=4096, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    # -- rendering -----------------------------------------------------------------------
    def event(self, obj: Any) -> bytes:
        return b"data: " + orjson.dumps(obj) + self._sep

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
                        "prompt_tokens": prompt_tokens,
                        "completion_tokens": n,
                        "total_tokens": prompt_tokens + n,
                    },
                }
            )
        if s.send_done:
            data += b"data: [DONE]" + self._sep
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


_SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n"
)


class _Conn(asyncio.Protocol):
    def __init__(self, server: ScriptedServer) -> None:
        self.srv = server
        self.buf = b""
        self.transport: asyncio.Transport | None = None
        self.busy = False
        self.served = 0
        self.closed = False
        self.task: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.task is not None and not self.task.done():
            self.task.cancel()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        self._try_parse()

    def _try_parse(self) -> None:
        if self.busy:
            return
        head_end = self.buf.find(b"\r\n\r\n")
        if head_end < 0:
            return
        head = self.buf[:head_end].decode("latin-1")
        lines = head.split("\r\n")
        method, path, _ = [*lines[0].split(" "), "", ""][:3]
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
        total = head_end + 4 + length
        if len(self.buf) < total:
            return
        body = self.buf[head_end + 4 : total]
        self.buf = self.buf[total:]
        if self.served and self.srv.script.drop_reused_connections and path.startswith("/v1/"):
            assert self.transport is not None
            self.transport.close()
            return
        self.served += 1
        self.busy = True
        self.task = asyncio.get_running_loop().create_task(self._handle(method, path, body))

    def _write(self, data: bytes) -> None:
        if self.transport is not None and not self.closed:
            self.transport.write(data)

    def _json(self, status: int, obj: Any) -> None:
        body = orjson.dumps(obj)
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 500: "Internal Server Error"}
        self._write(
            b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (status, reason.get(status, "Error").encode(), len(body), body)
        )

    def _done(self) -> None:
        self.busy = False
        self.task = None
        if self.buf:
            self._try_parse()

    async def _handle(self, method: str, path: str, body: bytes) -> None:
        try:
            await self._route(method, path.split("?")[0], body)
        except asyncio.CancelledError:
            return
        self._done()

    async def _route(self, method: str, path: str, body: bytes) -> None:
        s = self.srv.script
        if path == "/health":
            self._write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        elif path == "/v1/models":
            self._json(
                200,
                {
                    "object": "list",
                    "data": [{"id": s.model, "object": "model", "max_model_len": s.max_model_len}],
                },
            )
        elif path == "/tokenize" and method == "POST":
            req = orjson.loads(body or b"{}")
            text = str(req.get("prompt", req.get("content", "")))
            n = len(text.split()) * s.tokens_per_word
            self._json(
                200, {"count": n, "max_model_len": s.max_model_len, "tokens": list(range(n))}
            )
        elif path == "/metrics":
            c = self.srv.counters
            page = (
                f"scripted:requests_total {c.requests}\nscripted:completed_total {c.completed}\n"
                f"scripted:aborted_total {c.aborted}\nscripted:running {c.running}\n"
            ).encode()
            self._write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s"
                % (len(page), page)
            )
        elif path in ("/v1/completions", "/v1/chat/completions") and method == "POST":
            await self._generate(path.endswith("chat/completions"), body)
        else:
            self._json(404, {"error": {"message": f"no route {method} {path}", "code": 404}})

    async def _generate(self, chat: bool, body: bytes) -> None:
        s, c = self.srv.script, self.srv.counters
        arrival = time.perf_counter()
        c.requests += 1
        nth = c.requests
        try:
            req = orjson.loads(body)
        except orjson.JSONDecodeError:
            self._json(400, {"error": {"message": "body is not JSON"}})
            return
        if req.get("model") != s.model:
            self._json(
                404, {"error": {"message": f"The model `{req.get('model')}` does not exist."}}
            )
            return
        if s.fail_every and nth % s.fail_every == 0:
            self._json(500, {"error": {"message": "injected failure", "code": 500}})
            return
        if chat:
            prompt = " ".join(str(m.get("content", "")) for m in req.get("messages") or [])
        else:
            prompt = str(req.get("prompt", ""))
        p_tokens = len(prompt.split()) * s.tokens_per_word
        n = int(req.get("max_tokens") or req.get("max_completion_tokens") or 16)
        if p_tokens + n > s.max_model_len:
            msg = (
                f"This model's maximum context length is {s.max_model_len} tokens. However, "
                f"you requested {p_tokens + n} tokens ({p_tokens} in the messages, {n} in the "
                "completion)."
            )
            self._json(400, {"error": {"message": msg}})
            return
        c.prompt += p_tokens
        c.running += 1
        try:
            await self._stream(chat, nth, p_tokens, n, arrival)
        finally:
            c.running -= 1

    async def _stream(self, chat: bool, nth: int, p_tokens: int, n: int, arrival: float) -> None:
        srv, s, c = self.srv, self.srv.script, self.srv.counters
        if s.one_write and not (s.error_midstream_every or s.disconnect_every):
            key = (chat, n, p_tokens)
            data = srv._prerendered.get(key)
            if data is None:
                parts = [srv.role_event()] if chat and s.role_chunk else []
                parts += srv.chunks(chat, p_tokens, n)
                data = _SSE_HEAD + _chunked(b"".join(parts) + srv.tail(p_tokens, n)) + b"0\r\n\r\n"
                srv._prerendered[key] = data
            if s.ttft_ms:
                await asyncio.sleep(s.ttft_ms / 1000)
            self._write(data)
            c.completed += 1
            c.generated += n
            return
        events = srv.chunks(chat, p_tokens, n)
        cut = (
            len(events) // 2
            if (
                (s.error_midstream_every and nth % s.error_midstream_every == 0)
                or (s.disconnect_every and nth % s.disconnect_every == 0)
            )
            else None
        )
        self._write(_SSE_HEAD)
        loop = asyncio.get_running_loop()
        start = loop.time() - (time.perf_counter() - arrival)
        try:
            for i, ev in enumerate(events):
                if cut is not None and i == cut:
                    if s.disconnect_every and nth % s.disconnect_every == 0:
                        assert self.transport is not None
                        self.transport.abort()
                        c.aborted += 1
                        return
                    self._write(
                        _chunked(
                            srv.event(
                                {
                                    "error": {
                                        "message": "injected error mid-stream",
                                        "type": "InternalError",
                                        "code": 500,
                                    }
                                }
                            )
                        )
                    )
                    self._write(_chunked(b"data: [DONE]" + srv._sep) + b"0\r\n\r\n")
                    c.aborted += 1
                    return
                due = start + (s.ttft_ms + i * s.tokens_per_chunk * s.tpot_ms) / 1000
                delay = due - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                if self.closed:
                    c.aborted += 1
                    return
                if s.keepalive_comments:
                    self._write(_chunked(b": ping" + srv._sep))
                if i == 0 and chat and s.role_chunk:
                    # vLLM sends the role chunk with the first engine output, not on arrival.
                    ev = srv.role_event() + ev
                self._write(_chunked(ev))
            self._write(_chunked(srv.tail(p_tokens, n)) + b"0\r\n\r\n")
            c.completed += 1
            c.generated += n
        except asyncio.CancelledError:
            c.aborted += 1
            raise


async def serve_forever(script: Script, port: int = 0) -> None:
    server = ScriptedServer(script)
    bound = await server.start(port)
    print(f"READY {bound}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await server.close()
