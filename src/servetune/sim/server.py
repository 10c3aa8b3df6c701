"""The real-time face of the simulated engine: an OpenAI-compatible server on loopback.

Raw asyncio (uvloop when installed) and a minimal HTTP/1.1 (keep-alive, Content-Length
bodies, chunked responses), so that one core serves hundreds of streams with tokens leaving
on the simulated clock. The engine core (:mod:`servetune.sim.engine`) runs on the wall clock
(``perf_counter``: uvloop's ``loop.time()`` counts whole milliseconds): a step starts, its
duration comes from the step-time model, the SSE bytes of every token of the step are built
while its simulated time runs, and at the step's end only the writes are left — one per
stream per step (a vLLM server too emits one chunk per request per step). Generation requests
are parsed in the waits between steps (they could not join a running step anyway), so
parsing a burst of prompts never delays a write; read-outs (``GET``) are answered at once.
After each step's writes the live objects are frozen out of the garbage collector (O(1)), so
no collection scans the whole server mid-step; the full collection runs when the engine is
idle. ``/sim/stats`` reports the emission lag (write time − step end) and the worst time seen
per phase of the loop (step, sleeps, parsing, collections), to tell where lag comes from.

The offline face (``sim run``) also models vLLM's API server in front of the engine (serial
intake per request, a fixed token latency: :mod:`servetune.sim.frontend`); the real-time face
does not add it: its own HTTP front end is real.

Endpoints, shaped as vLLM's: ``/v1/completions`` and ``/v1/chat/completions`` (streaming SSE
``data: {...}\\n\\n`` with ``stream_options.include_usage`` → a last chunk with empty
``choices`` and ``usage``, then ``data: [DONE]``; or one JSON body), ``/v1/models`` (with
``max_model_len``), ``/health``, ``/tokenize`` (``{"model","prompt"}`` →
``{"count","max_model_len","tokens"}``), ``/version``, ``/metrics`` (Prometheus text, vLLM
0.8–0.9 and V1 names) and ``/sim/stats`` (the emission-lag figures, JSON).

A client that disconnects aborts its request in the engine (``finished_reason="abort"``). A
prompt plus ``max_tokens`` beyond ``max_model_len`` is an HTTP 400 with vLLM's message. Text is
word-like tokens; prompts are counted with the approximate counter of
:mod:`servetune.workload.tokens` (one word or punctuation mark ≈ one token).

Run it as a process: ``python -m servetune.sim.server --config-json '{...}' --port 0`` prints
``READY <port>`` once it listens (``servetune sim serve`` and ``embedded`` use this).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import itertools
import json
import math
import sys
import time
from array import array
from collections import deque
from typing import Any

import orjson

from servetune.errors import ServetuneError
from servetune.sim.config import EngineConfig, ResolvedConfig
from servetune.sim.engine import DONE, Engine, SimRequest
from servetune.sim.hist import LAG_BUCKETS, Hist
from servetune.sim.memory import MemoryPlan, plan_memory
from servetune.sim.step_writer import StepWriter
from servetune.workload.tokens import _PIECE, ApproxTokenizer

_WORDS = [(" " + w).encode() for w in ApproxTokenizer()._words]
_SPIN_S = 0.004
"""Wake this long before a step ends and sleep the rest precisely (uvloop's timers fire in
whole milliseconds, and the loop's callbacks can run late: with 2 ms the loop thread reached
the step's end 1.4–3 ms late at its p99 under 128 req/s, with 4 ms 0.25–0.6 ms)."""
_MAX_LAG_SAMPLES = 2_000_000
_INTAKE_S = 0.002
"""Parse requests for at most this long at a time between steps."""
Write = tuple["Conn", bytes, "Stream | None"]
"""A step's write: connection, bytes, and the stream that ends with them."""


def _pcts(xs: list[float] | list[int], scale: float = 1e3) -> dict[str, float] | None:
    """p50 / p90 / p99 / max of sorted ``xs`` (× ``scale``)."""
    if not xs:
        return None
    n = len(xs)
    return {
        "p50": xs[n // 2] * scale,
        "p90": xs[min(n - 1, (9 * n) // 10)] * scale,
        "p99": xs[min(n - 1, (99 * n) // 100)] * scale,
        "max": xs[-1] * scale,
    }


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _json_response(status: int, body: Any, reason: str = "OK") -> bytes:
    data = orjson.dumps(body)
    return b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
        status,
        reason.encode(),
        len(data),
        data,
    )


def _error(status: int, message: str, typ: str) -> bytes:
    reasons = {400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}
    return _json_response(
        status,
        {"object": "error", "message": message, "type": typ, "param": None, "code": status},
        reasons.get(status, "Error"),
    )


class Stream:
    """One request in flight: where its tokens go and how to frame them."""

    __slots__ = (
        "chat",
        "closed",
        "conn",
        "created",
        "include_usage",
        "prefix",
        "req",
        "rid",
        "sent",
        "stream",
        "word",
    )

    def __init__(
        self,
        conn: Conn,
        req: SimRequest,
        rid: str,
        model: str,
        chat: bool,
        stream: bool,
        include_usage: bool,
    ) -> None:
        self.conn = conn
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
        self.prefix = b"data: " + head + (b'"delta":{"content":"' if chat else b'"text":"')

    def token_bytes(self, last: bool) -> bytes:
        w = _WORDS[(self.word + self.sent) % len(_WORDS)]
        self.sent += 1
        tail = (
            b'"},"logprobs":null,"finish_reason":"length"}]}\n\n'
            if last and self.chat
            else b'","logprobs":null,"finish_reason":"length","stop_reason":null}]}\n\n'
            if last
            else b'"},"logprobs":null,"finish_reason":null}]}\n\n'
            if self.chat
            else b'","logprobs":null,"finish_reason":null,"stop_reason":null}]}\n\n'
        )
        return self.prefix + w + tail

    def opening(self) -> bytes:
        """The chat stream's role-only first chunk (vLLM sends it with the first token)."""
        head = self.prefix[: -len(b'"delta":{"content":"')]
        return (
            head + b'"delta":{"role":"assistant","content":""},"logprobs":null,'
            b'"finish_reason":null}]}\n\n'
        )

    def usage_bytes(self) -> bytes:
        usage = {
            "prompt_tokens": self.req.prompt_len,
            "total_tokens": self.req.prompt_len + self.sent,
            "completion_tokens": self.sent,
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
        n = self.req.out
        text = b"".join(_WORDS[(self.word + i) % len(_WORDS)] for i in range(n)).decode()
        usage = {
            "prompt_tokens": self.req.prompt_len,
            "total_tokens": self.req.prompt_len + n,
            "completion_tokens": n,
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
        return _json_response(200, body)


class SimServer:
    """The engine on the wall clock plus the HTTP front end."""

    def __init__(self, cfg: EngineConfig) -> None:
        self.cfg = cfg
        self.r: ResolvedConfig = cfg.resolve()
        self.mem: MemoryPlan = plan_memory(self.r)
        self.model = self.r.served_model_name
        self.names = {self.model, self.r.model.name, self.r.model.name.split("/")[-1]}
        self.eng = Engine(self.r, self.mem)
        self.tok = ApproxTokenizer()
        self._ids = itertools.count()
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._server: asyncio.base_events.Server | None = None
        self.port = 0
        self.t0 = 0.0
        self.lag = Hist(LAG_BUCKETS)
        self.lag_samples = array("d")
        self.started = int(time.time())
        self.worst: dict[str, float] = {}
        """The longest time seen per phase of the engine loop (seconds): where lag comes from."""
        self._gc_t = 0.0
        self._idle_gc = False
        self.gc_stats: dict[int, tuple[int, float]] = {}
        """Collections during service, per generation: (count, seconds)."""
        gc.callbacks.append(self._gc_pause)
        self.writes = 0
        self.write_s = 0.0
        self.batch_s = array("d")
        self.batch_n = array("l")
        """Per step: how long its writes took, and how many."""
        self.wake_lag_s = 0.0
        self.wake_s = array("d")
        """Per step: the loop thread's wake-up after the step's end."""
        self.side_wake_s = array("d")
        """Per step split over two threads: the helper's wake-up after the step's end."""
        self.batches = 0
        self.writer: StepWriter | None = None
        """Sends each step's writes (:mod:`servetune.sim.step_writer`); made at start."""
        self.intake: deque[Conn] = deque()
        """Connections holding a generation request not parsed yet: the engine loop takes
        them in between steps, so that parsing never delays a token's write."""

    # --- life ----------------------------------------------------------------------------
    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        loop = asyncio.get_running_loop()
        # uvloop's loop.time() counts whole milliseconds: the engine runs on perf_counter
        self.t0 = time.perf_counter()
        self._wake = asyncio.Event()
        self.writer = StepWriter()
        self._server = await loop.create_server(
            lambda: Conn(self), host, port, backlog=4096, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self._task = loop.create_task(self._engine_loop())
        return self.port

    async def close(self) -> None:
        with contextlib.suppress(ValueError):
            gc.callbacks.remove(self._gc_pause)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        if self.writer is not None:
            self.writer.close()

    def clock(self) -> float:
        return time.perf_counter() - self.t0

    # --- requests ------------------------------------------------------------------------
    def prompt_tokens(self, body: dict[str, Any], chat: bool) -> tuple[int, list[str]]:
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
        pieces = _PIECE.findall(text)
        return sum(1 + (len(p) - 1) // 7 for p in pieces), pieces

    def block_hashes(self, pieces: list[str]) -> tuple[int, ...]:
        if not self.r.enable_prefix_caching:
            return ()
        B = self.r.block_size
        out = []
        h = 0
        for i in range(len(pieces) // B):
            h = hash((h, tuple(pieces[i * B : (i + 1) * B])))
            out.append(h)
        return tuple(out)

    def submit(
        self, conn: Conn, body: dict[str, Any], chat: bool, arrival: float | None = None
    ) -> bytes | None:
        """Queue a generation request; returns an error response, or None when accepted.
        ``arrival``: when its bytes came in (engine clock; default now)."""
        model = body.get("model")
        if model is not None and model not in self.names:
            return _error(404, f"The model `{model}` does not exist.", "NotFoundError")
        n_prompt, pieces = self.prompt_tokens(body, chat)
        max_len = self.r.max_model_len
        mt = body.get("max_completion_tokens") if chat else None
        max_tokens = mt if mt is not None else body.get("max_tokens")
        if max_tokens is None:
            max_tokens = max(1, max_len - n_prompt)
        try:
            max_tokens = int(max_tokens)
        except (TypeError, ValueError):
            return _error(
                400, f"max_tokens must be an integer (got {max_tokens!r})", "BadRequestError"
            )
        if max_tokens < 1:
            return _error(
                400, f"max_tokens must be at least 1, got {max_tokens}.", "BadRequestError"
            )
        if n_prompt + max_tokens > max_len:
            what = "messages" if chat else "prompt"
            return _error(
                400,
                f"This model's maximum context length is {max_len} tokens. However, you "
                f"requested {n_prompt + max_tokens} tokens ({n_prompt} in the {what}, "
                f"{max_tokens} in the completion). Please reduce the length of the {what} "
                "or completion.",
                "BadRequestError",
            )
        stream = bool(body.get("stream", False))
        opts = body.get("stream_options") or {}
        include_usage = bool(opts.get("include_usage", False)) if stream else False
        rid_n = next(self._ids)
        req = SimRequest(
            rid_n,
            max(1, n_prompt),
            max_tokens,
            self.clock() if arrival is None else arrival,
            self.block_hashes(pieces),
        )
        rid = ("chatcmpl-" if chat else "cmpl-") + f"{rid_n:x}"
        s = Stream(conn, req, rid, self.model, chat, stream, include_usage)
        req.tag = s
        conn.active = s
        if stream:
            conn.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\n"
                b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n"
            )
        self.eng.add(req)
        assert self._wake is not None
        self._wake.set()
        return None

    def abort(self, s: Stream) -> None:
        if s.req.state != DONE:
            self.eng.abort(s.req)
        s.req.tag = None

    # --- the engine loop -------------------------------------------------------------------
    def take_intake(self, until: float = math.inf) -> None:
        """Parse the generation requests that came in, while ``perf_counter() < until``."""
        perf = time.perf_counter
        while self.intake and perf() < until:
            conn = self.intake.popleft()
            conn.queued = False
            conn.parse()

    async def _engine_loop(self) -> None:
        """Step, then wait for the step's simulated end, then write its tokens.

        Requests are parsed in the wait (they join the next step, as in vLLM) or, when the
        engine has nothing to do, at once. After each step's writes the objects alive are
        frozen out of the garbage collector (``gc.freeze`` is O(1)), so that a collection
        never scans the server's whole state in the middle of a step; the full collection
        runs when the engine goes idle.
        """
        eng = self.eng
        assert self._wake is not None
        wake = self._wake
        perf = time.perf_counter
        while True:
            if eng.idle():
                if self.intake:
                    self.take_intake()
                    continue
                self._idle_gc = True
                gc.unfreeze()
                gc.collect()
                gc.freeze()
                self._idle_gc = False
                wake.clear()
                await wake.wait()
                continue
            if self.intake:
                # a backlog is taken in a little at a time: the engine keeps stepping
                self.take_intake(perf() + _INTAKE_S)
            now = perf() - self.t0
            if eng.now < now:
                eng.now = now
            t = perf()
            emitted = eng.advance(collect=True)
            if eng.finished:
                eng.finished.clear()
            # Build every write of this step while its simulated time runs, so that at the
            # step's end only the writes are left.
            writes = self._build(emitted)
            target = self.t0 + eng.now
            writer = self.writer
            assert writer is not None
            writer.arm(writes, target)
            self._worst("step_and_build", perf() - t)
            if self.intake:
                self.take_intake(target - _SPIN_S - _INTAKE_S)
            delay = target - perf()
            if delay > _SPIN_S:
                await asyncio.sleep(delay - _SPIN_S)
                self._worst("coarse_sleep_late", perf() - (target - _SPIN_S))
            if writes:
                writer.hold_cpu()
            rest = target - perf()
            if rest > 0:
                time.sleep(rest)
                self._worst("fine_sleep_late", perf() - target)
            if writes:
                self._write(writes, target)
                gc.freeze()
            else:
                await asyncio.sleep(0)

    def _build(self, emitted: list[SimRequest]) -> list[Write]:
        """(connection, bytes, stream that ends with them) for every token of a step."""
        out: list[Write] = []
        for req in emitted:
            s: Stream | None = req.tag  # type: ignore[assignment]
            if s is None or s.closed:
                continue
            last = req.state == DONE
            if not s.stream:
                s.sent += 1
                if last:
                    req.out = s.sent
                    out.append((s.conn, s.full_body(self.model), s))
                continue
            data = s.token_bytes(last)
            if s.chat and s.sent == 1:
                data = s.opening() + data
            if last:
                if s.include_usage:
                    data += s.usage_bytes()
                out.append((s.conn, _chunk(data + b"data: [DONE]\n\n") + b"0\r\n\r\n", s))
            else:
                out.append((s.conn, _chunk(data), None))
        return out

    def _worst(self, what: str, seconds: float) -> None:
        if seconds > self.worst.get(what, 0.0):
            self.worst[what] = seconds

    def _gc_pause(self, phase: str, info: dict[str, int]) -> None:
        if self._idle_gc:
            return
        if phase == "start":
            self._gc_t = time.perf_counter()
        else:
            gen = info.get("generation", 0)
            took = time.perf_counter() - self._gc_t
            self._worst(f"gc_gen{gen}", took)
            n, total = self.gc_stats.get(gen, (0, 0.0))
            self.gc_stats[gen] = (n + 1, total + took)

    def _write(self, writes: list[Write], t_target: float) -> None:
        """Send a step's writes, end the streams they finish, note the lags."""
        t_start = time.perf_counter()
        assert self.writer is not None
        stamps, first, side_start = self.writer.send(writes, t_start)
        for conn, _, ending in writes:
            if ending is not None:
                conn.done(ending)
        if side_start is not None and len(self.side_wake_s) < _MAX_LAG_SAMPLES:
            self.side_wake_s.append(side_start - t_target)
        self._note_writes(stamps, t_target, t_start, first)

    def _note_writes(
        self, stamps: array[float], target: float, t_start: float, first: float
    ) -> None:
        """Lags (write time − step end) and the step's write cost."""
        took = (max(stamps) - first) if stamps else 0.0
        self.write_s += took
        if len(self.batch_s) < _MAX_LAG_SAMPLES:
            self.batch_s.append(took)
            self.batch_n.append(len(stamps))
        self.writes += len(stamps)
        self.wake_lag_s += t_start - target
        if len(self.wake_s) < _MAX_LAG_SAMPLES:
            self.wake_s.append(t_start - target)
        self.batches += 1
        lags = array("d", (x - target for x in stamps))
        observe = self.lag.observe
        for lag in lags:
            observe(lag)
        room = _MAX_LAG_SAMPLES - len(self.lag_samples)
        if room > 0:
            self.lag_samples.extend(lags[:room])

    # --- read-outs -----------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        lags = sorted(self.lag_samples)

        def pct(q: float) -> float | None:
            if not lags:
                return None
            return lags[min(len(lags) - 1, math.ceil(q * len(lags)) - 1)] * 1e3

        c = self.eng.counters
        return {
            "emission_lag_ms": {
                "count": len(lags),
                "p50": pct(0.5),
                "p90": pct(0.9),
                "p99": pct(0.99),
                "p999": pct(0.999),
                "max": lags[-1] * 1e3 if lags else None,
            },
            "write_us_per_token": self.write_s / self.writes * 1e6 if self.writes else None,
            "write_batch_ms": _pcts(sorted(self.batch_s)),
            "write_batch_size": _pcts(sorted(self.batch_n), 1.0),
            "wake_lag_ms_mean": self.wake_lag_s / self.batches * 1e3 if self.batches else None,
            "wake_lag_ms": _pcts(sorted(self.wake_s)),
            "writer": self.writer.name if self.writer else None,
            "helper_wake_lag_ms": _pcts(sorted(self.side_wake_s)),
            "tokens_per_step_written": self.writes / self.batches if self.batches else None,
            "worst_ms": {k: v * 1e3 for k, v in sorted(self.worst.items())},
            "gc": {
                f"gen{g}": {"count": n, "total_ms": t * 1e3}
                for g, (n, t) in sorted(self.gc_stats.items())
            },
            "steps": c.steps,
            "generation_tokens": c.generation_tokens,
            "preemptions": c.preemptions,
            "running": self.eng.num_running,
            "waiting": self.eng.num_waiting,
            "kv_cache_usage": self.eng.pool.usage,
            "engine_busy_s": self.eng.busy_s,
            "uptime_s": self.clock(),
        }

    def metrics_text(self) -> bytes:
        from servetune.sim.exposition import render

        return render(self)


class Conn(asyncio.Protocol):
    """One client connection: parses requests, writes responses, aborts on disconnect."""

    def __init__(self, server: SimServer) -> None:
        self.server = server
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None
        self.fd = -1
        """A duplicate of the socket for direct writes (:meth:`StepWriter.dup`; -1: none)."""
        self.active: Stream | None = None
        self.queued = False
        self.arrival = 0.0
        """When the first byte of the request in ``buf`` came in (engine clock)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        if self.server.writer is not None:
            self.fd = self.server.writer.dup(transport.get_extra_info("socket"))

    def connection_lost(self, exc: Exception | None) -> None:
        s = self.active
        if s is not None and not s.closed:
            s.closed = True
            self.server.abort(s)
        self.active = None
        self.transport = None
        if self.server.writer is not None:
            self.server.writer.retire(self.fd)
        self.fd = -1

    def write(self, data: bytes) -> None:
        if self.transport is not None:
            self.transport.write(data)

    def done(self, s: Stream) -> None:
        s.closed = True
        s.req.tag = None  # no cycle request <-> stream left for the GC
        if self.active is s:
            self.active = None
        if self.buf:
            self.arrival = self.server.clock()
            self._queue()

    def data_received(self, data: bytes) -> None:
        if not self.buf:
            self.arrival = self.server.clock()
        self.buf += data
        if self.active is None:
            if self.buf.startswith(b"GET"):
                self.parse()  # read-outs answer at once (they never touch the engine)
            else:
                self._queue()

    def _queue(self) -> None:
        if not self.queued:
            self.queued = True
            srv = self.server
            srv.intake.append(self)
            if srv._wake is not None and srv.eng.idle():
                srv._wake.set()

    def parse(self) -> None:
        while self.active is None and self.buf:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buf[:end]).decode("latin-1")
            lines = head.split("\r\n")
            try:
                method, target, _ = lines[0].split(" ", 2)
            except ValueError:
                self.write(_error(400, "malformed request line", "BadRequestError"))
                self.buf.clear()
                return
            length = 0
            close = False
            for line in lines[1:]:
                k, _, v = line.partition(":")
                k = k.strip().lower()
                if k == "content-length":
                    length = int(v.strip() or 0)
                elif k == "connection" and v.strip().lower() == "close":
                    close = True
            if len(self.buf) < end + 4 + length:
                return
            body = bytes(self.buf[end + 4 : end + 4 + length])
            del self.buf[: end + 4 + length]
            self._handle(method, target.split("?", 1)[0], body)
            if close and self.active is None and self.transport is not None:
                self.transport.close()

    def _handle(self, method: str, path: str, body: bytes) -> None:
        srv = self.server
        path = path.rstrip("/") or "/"
        if method == "GET":
            if path == "/health" or path == "/ping":
                self.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
            elif path == "/v1/models":
                self.write(
                    _json_response(
                        200,
                        {
                            "object": "list",
                            "data": [
                                {
                                    "id": srv.model,
                                    "object": "model",
                                    "created": srv.started,
                                    "owned_by": "vllm",
                                    "root": srv.r.model.name,
                                    "parent": None,
                                    "max_model_len": srv.r.max_model_len,
                                    "permission": [],
                                }
                            ],
                        },
                    )
                )
            elif path == "/version":
                self.write(_json_response(200, {"version": "servetune-sim"}))
            elif path == "/metrics":
                text = srv.metrics_text()
                self.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; "
                    b"charset=utf-8\r\nContent-Length: %d\r\n\r\n%s" % (len(text), text)
                )
            elif path == "/sim/stats":
                self.write(_json_response(200, srv.stats()))
            elif path == "/sim/config":
                self.write(_json_response(200, {**srv.r.summary(), "memory": srv.mem.model_dump()}))
            else:
                self.write(_error(404, f"Not Found: {path}", "NotFoundError"))
            return
        if method != "POST":
            self.write(_error(405, "Method Not Allowed", "MethodNotAllowed"))
            return
        try:
            payload = orjson.loads(body) if body else {}
            if not isinstance(payload, dict):
                raise ValueError("the body must be a JSON object")
        except (orjson.JSONDecodeError, ValueError) as exc:
            self.write(_error(400, f"invalid JSON body: {exc}", "BadRequestError"))
            return
        if path == "/tokenize":
            chat = "messages" in payload
            n, pieces = srv.prompt_tokens(payload, chat)
            ids = srv.tok.encode(" ".join(pieces)) if pieces else []
            self.write(
                _json_response(
                    200, {"count": n, "max_model_len": srv.r.max_model_len, "tokens": ids}
                )
            )
        elif path in ("/v1/completions", "/v1/chat/completions"):
            err = srv.submit(self, payload, path.endswith("chat/completions"), self.arrival)
            if err is not None:
                self.write(err)
        else:
            self.write(_error(404, f"Not Found: {path}", "NotFoundError"))


async def serve(
    cfg: EngineConfig,
    host: str = "127.0.0.1",
    port: int = 0,
    announce: bool = False,
    ready_line: bool = False,
) -> None:
    srv = SimServer(cfg)
    real_port = await srv.start(host, port)
    # Everything built so far lives as long as the server: keep it out of every collection,
    # so that a collection never scans it in the middle of a step's writes.
    gc.collect()
    gc.freeze()
    if announce:
        print(
            f"servetune sim: {srv.model} on {srv.r.gpu.name} (TP={srv.r.tensor_parallel_size})"
            f" at http://{host}:{real_port}/v1",
            file=sys.stderr,
        )
        for line in srv.mem.log_lines():
            print("  " + line, file=sys.stderr)
    if ready_line:
        print(f"READY {real_port}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await srv.close()


def _install_loop() -> None:
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        pass


def serve_forever(
    cfg: EngineConfig,
    host: str = "127.0.0.1",
    port: int = 8000,
    announce: bool = True,
    ready_line: bool = False,
) -> None:
    """Run the server until interrupted (``servetune sim serve``)."""
    if host not in ("127.0.0.1", "localhost", "::1"):
        print(f"servetune sim: warning: listening on {host}, not loopback", file=sys.stderr)
    plan_memory(cfg)  # refuse to start before binding, like vLLM
    _install_loop()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(cfg, host, port, announce, ready_line))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m servetune.sim.server")
    ap.add_argument("--config-json", required=True, help="an EngineConfig as JSON")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args(argv)
    try:
        cfg = EngineConfig.model_validate(json.loads(args.config_json))
        serve_forever(cfg, args.host, args.port, announce=False, ready_line=True)
    except ServetuneError as exc:
        print(f"ERROR {exc.message}" + (f" | hint: {exc.hint}" if exc.hint else ""), flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
