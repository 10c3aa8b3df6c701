"""One upstream response on its way to the client: head, then the body as it arrives.

Before the response is *committed* (its head written to the client) nothing has reached the
client, so the request may still be retried elsewhere; body bytes that arrive in that moment
are held and flushed at commit. Once committed, every piece goes straight to the client
(:meth:`Relay.on_body` runs inside the upstream connection's ``data_received``).

While passing an event stream it also

- stamps the first piece that carries a generated token (a chat stream's role-only opening
  chunk does not count) — the gateway's own TTFT;
- reads the engine's ``usage`` from the stream (the gateway asks for it with
  ``stream_options.include_usage`` and, when the client did not, removes the usage-only chunk
  vLLM sends, so the client gets exactly the stream it asked for); a piece is only scanned
  when it holds ``"usage"`` (or an event split across reads is pending), and when the client
  asked for usage itself (nothing to remove) only after the piece has been written;
- counts data events and their bytes, and keeps the stream's first 4 KB and pieces spread
  evenly along it (at most ~8 KB): when a stream ends without usage (a client that hangs up
  mid-stream), its output tokens are estimated from those once, on that path only
  (:mod:`servetune.gateway.output_estimate`) — an engine that sends several tokens per event
  (speculative decoding, a stream interval above 1) is not charged per event;
- ends an idle stream (nothing for ``idle_s``) with a terminal error event inside the 200;
- notes a stream that *failed inside its 200* (:attr:`Relay.failed_inside`): an error event
  from the engine (``data: {"error"…`` — vLLM, SGLang, TGI and llama.cpp all open their
  in-stream errors with that key; generated text cannot contain it unescaped), a choice that
  finished with ``"finish_reason":"error"``, or a body that ended without the closing
  ``data: [DONE]`` (the engine stopped mid-stream but closed the HTTP body properly). The
  client gets the stream as the engine sent it; the gateway counts it as the upstream's
  failure (the canary's errors, ``upstream_failures_total``). Two searches in C per piece,
  no copy.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, Protocol

import orjson

from servetune.gateway.output_estimate import PIECE_BYTES, SAMPLE_BYTES, SPREAD_BYTES
from servetune.gateway.sse_frames import ends_event, event_end, last_event_end
from servetune.gateway.upstream import UpstreamConnection
from servetune.http import Exchange

_HIGH_WATER = 256 * 1024


class UpstreamLost(Exception):
    """The upstream went away (or timed out) before its response head."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


def error_event(message: str, type_: str, code: int) -> bytes:
    body = orjson.dumps({"error": {"message": message, "type": type_, "param": None, "code": code}})
    return b"data: " + body + b"\n\ndata: [DONE]\n\n"


def _token_piece(data: bytes) -> bool:
    # A chat stream opens with a role-only chunk; any other piece with an event carries output.
    if b'"role"' not in data:
        return True
    return data.find(b"data:", data.find(b"data:") + 5) >= 0  # a second event (no full count)


class RelayOwner(Protocol):
    """Who a relay reports to (:class:`~servetune.gateway.flight.Flight`), from inside the
    upstream connection's callbacks."""

    def head_in(self) -> None:
        """The response head is in (``status``, ``headers``, ``sse`` are set)."""
        ...

    def head_failed(self, exc: Exception) -> None:
        """No head: :class:`UpstreamLost` or ``TimeoutError`` (the first-byte deadline)."""
        ...

    def relay_ended(self, ok: bool) -> None:
        """The body ended (``ok``) or was cut or idle (not called after :meth:`Relay.cancel`)."""
        ...


class Relay:
    __slots__ = (
        "_ending",
        "_later",
        "_nth",
        "_out",
        "_parts",
        "_rest",
        "_resume_task",
        "_room",
        "_spread_bytes",
        "_stride",
        "_timer",
        "committed",
        "conn",
        "end_reason",
        "ended",
        "events",
        "ex",
        "failed_inside",
        "first_token_ns",
        "head_seen",
        "headers",
        "idle_s",
        "last_ns",
        "last_piece",
        "nbytes",
        "ok",
        "owner",
        "sample",
        "spread",
        "sse",
        "status",
        "strip_usage",
        "tail",
        "tail_before",
        "usage",
    )

    def __init__(
        self,
        ex: Exchange,
        conn: UpstreamConnection,
        strip_usage: bool,
        idle_s: float,
        owner: RelayOwner | None = None,
    ) -> None:
        self.ex = ex
        self.conn = conn
        self.strip_usage = strip_usage
        self.idle_s = idle_s
        self.owner = owner
        """Told of the head (or its failure) and of the end, synchronously."""
        self.head_seen = False
        self.ended = False
        self.ok = False
        """Once ended — True: the body ended normally; False: cut (``end_reason`` says why)."""
        self.end_reason = ""
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.sse = False
        self.committed = False
        self._parts: list[bytes] = []
        self._out: list[bytes] = []
        """Bytes for the client from the current upstream read, written at once by
        :meth:`flush` (one write per read; the stream's end in the same write)."""
        self._ending = False
        self._later: list[bytes] = []
        """Pieces already passed on unchanged, still to be read for ``usage`` (without
        ``strip_usage`` that reading waits until the piece has been written: not in the
        answer's way)."""
        self._rest = b""
        self.first_token_ns = 0
        self.last_ns = 0
        self.events = 0
        self.nbytes = 0
        """Bytes of the events counted (with their framing)."""
        self.sample: list[bytes] = []
        """The stream's opening bytes (for the estimate without usage)."""
        self._room = SAMPLE_BYTES
        self.last_piece = b""
        """The last piece counted (where a stream's ``[DONE]`` is)."""
        self.spread: list[bytes] = []
        """Pieces kept evenly along the whole stream (for its tokens per byte)."""
        self._nth = 0
        self._stride = 0
        """Keep the pieces whose number has none of these bits set (a power of two less 1)."""
        self._spread_bytes = 0
        self.usage: dict[str, Any] | None = None
        self.failed_inside = ""
        """Why a stream that ended normally at the HTTP level failed inside its 200
        (``"error_event"``, ``"truncated"``; empty: it did not)."""
        self.tail = b""
        self.tail_before = b""
        """The last two pieces passed (references, not copies): where ``[DONE]`` must be."""
        self._timer: asyncio.TimerHandle | None = None
        self._resume_task: asyncio.Task[None] | None = None

    # -- events from the upstream connection -------------------------------------------------
    def on_head(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.status = status
        self.headers = headers
        for k, v in headers:
            if k == b"content-type":
                self.sse = v.startswith(b"text/event-stream")
                break
        if not self.head_seen:
            self.head_seen = True
            if self.owner is not None:
                self.owner.head_in()

    def head_timeout(self) -> None:
        if not self.head_seen and not self.ended:
            self.head_seen = True
            if self.owner is not None:
                self.owner.head_failed(TimeoutError())

    def on_body(self, data: bytes) -> None:
        if not self.committed or not self.sse:
            self._parts.append(data)
            return
        self._pass(data)

    def on_end(self, keep_alive: bool) -> None:
        self._finish(True, "")

    def on_lost(self, meaning: str, error: str) -> None:
        if not self.head_seen:
            self.head_seen = True
            if self.owner is not None:
                self.owner.head_failed(UpstreamLost("reset", f"{error} before the response head"))
            return
        if meaning == "complete":  # a body framed by the close itself
            self._finish(True, "")
        else:
            self._finish(False, f"the upstream closed the connection mid-response ({error})")

    # -- passing the stream ------------------------------------------------------------------
    def commit_stream(self, headers: list[tuple[bytes, bytes]]) -> None:
        """Start the streamed response with whatever body arrived before it (the head goes
        out with the first bytes: one write when the whole answer is already here)."""
        self.ex.start(self.status, headers=headers, flush=False)
        self.committed = True
        self.last_ns = time.perf_counter_ns()
        parts, self._parts = self._parts, []
        for p in parts:
            self._pass(p)
        if self.ended:
            self._ending = True
            if self._rest and self.strip_usage:
                self._out.append(self._rest)
                self._rest = b""
            if not self.ok:
                self._out.append(error_event(self.end_reason, "upstream_error", 502))
        self._write()

    def flush(self) -> None:
        """The upstream read is over: write what it produced (and the end, if it came with
        it); a stream still open gets its idle clock (not armed for an answer that ended in
        the read that brought it), and so does a whole answer whose body is still to come
        (an upstream that sent the head and stalled would hold the client and the slot)."""
        self._write()
        if (
            self._timer is None
            and not self.ended
            and self.head_seen
            and (self.committed or not self.sse)
        ):
            self._arm_idle()

    def _write(self) -> None:
        out = self._out
        ex = self.ex
        if out:
            data = out[0] if len(out) == 1 else b"".join(out)
            out.clear()
            if self._ending:
                if not ex.finished:
                    ex.end(data)
            else:
                ex.send(data)
                if ex.conn.buffered > _HIGH_WATER:
                    self._backpressure()
        elif self._ending and not ex.finished:
            ex.end()
        if self._later:
            self._read_usage_later()

    def _read_usage_later(self) -> None:
        """Read ``usage`` from the pieces written unchanged, in order (as :meth:`_pass` would
        have, had it not left them until after the write)."""
        later, self._later = self._later, []
        for piece in later:
            at = piece.find(b'"usage"')
            if self._rest or at >= 0 or not ends_event(piece):
                self._scan(piece, at)

    def _pass(self, data: bytes) -> None:
        now = time.perf_counter_ns()
        self.last_ns = now
        at = data.find(b'"usage"')
        if self.strip_usage:
            data = self._scan(data, at)  # whole events only: the usage chunk may be cut
        elif self._later or self._rest or at >= 0 or not ends_event(data):
            # goes out unchanged: read for usage once written (a piece that ends inside an
            # event is read too: the usage may begin in it)
            self._later.append(data)
        if data:
            if not self.first_token_ns and b"data:" in data and _token_piece(data):
                self.first_token_ns = now
            if not self.failed_inside and (
                b'{"error"' in data or b'"finish_reason":"error"' in data
            ):
                self.failed_inside = "error_event"
            self.tail_before, self.tail = self.tail, data
            if self.usage is None:  # the fallback count: not needed once usage is in
                # both spellings the SSE standard allows (TGI writes ``data:{``)
                self.events += data.count(b"data: {") + data.count(b"data:{")
                self.nbytes += len(data)
                if self._room > 0:  # the opening bytes (a copy of at most that many)
                    self.sample.append(data if len(data) <= self._room else data[: self._room])
                    self._room -= len(data)
                self.last_piece = data
                self._nth += 1
                if not self._nth & self._stride:  # every stride-th piece, along the stream
                    self._keep_spread(data)
            self._out.append(data)

    def _keep_spread(self, data: bytes) -> None:
        """Keep a reference to this piece (a copy of its first KB when longer); past the
        budget drop every other kept piece and keep every other from now on: the pieces
        stay evenly spread over the whole stream, at most ~:data:`SPREAD_BYTES`, with no
        work per piece but a count."""
        piece = data if len(data) <= PIECE_BYTES else data[:PIECE_BYTES]
        self.spread.append(piece)
        self._spread_bytes += len(piece)
        if self._spread_bytes > SPREAD_BYTES:
            del self.spread[0::2]
            self._spread_bytes = sum(map(len, self.spread))
            self._stride = self._stride * 2 + 1

    def _scan(self, data: bytes, at: int) -> bytes:
        """Read ``usage`` from whole events; with ``strip_usage`` hold back a split event and
        drop the usage-only chunk. Returns the bytes to forward. ``at``: where ``data`` holds
        ``"usage"`` (-1: nowhere). Only finds in C: no step per event."""
        rest = self._rest
        buf = rest + data if rest else data
        cut = last_event_end(buf)
        if cut < 0:
            self._rest = buf
            return b"" if self.strip_usage else data
        whole, self._rest = (buf, b"") if cut == len(buf) else (buf[:cut], buf[cut:])
        if rest or at >= cut:  # the split event's part, or past the whole events
            at = whole.find(b'"usage"')
        while at >= 0:
            start = whole.rfind(b"data:", 0, at)
            end = event_end(whole, at)
            if start < 0 or end < 0:
                break
            obj = None
            with contextlib.suppress(orjson.JSONDecodeError):
                obj = orjson.loads(whole[start + 5 : end].strip())
            if isinstance(obj, dict) and isinstance(obj.get("usage"), dict):
                self.usage = obj["usage"]
                if self.strip_usage and not obj.get("choices"):
                    whole = whole[:start] + whole[end:]
                    end = start
            at = whole.find(b'"usage"', end)
        return whole if self.strip_usage else data

    def _backpressure(self) -> None:
        if self._resume_task is not None:
            return
        self.conn.pause()

        async def resume() -> None:
            try:
                await self.ex.drain()
            finally:
                self._resume_task = None
                self.conn.resume()

        self._resume_task = asyncio.create_task(resume())

    # -- idle and the end --------------------------------------------------------------------
    def _arm_idle(self) -> None:
        self._timer = asyncio.get_running_loop().call_later(self.idle_s, self._idle_check)

    def _idle_check(self) -> None:
        self._timer = None
        if self.ended:
            return
        left = self.idle_s - (time.perf_counter_ns() - self.last_ns) / 1e9
        if left > 0:
            self._timer = asyncio.get_running_loop().call_later(left, self._idle_check)
            return
        self.conn.abort()
        self._finish(False, f"the upstream sent nothing for {self.idle_s:g} s", idle=True)

    def end_with_error(self, reason: str, kind: str, code: int) -> None:
        """End a committed stream now with a terminal error event (the gateway shutting
        down): the client is told why the stream stopped, not just cut."""
        if self.ended:
            return
        self.conn.abort()
        self._finish(False, reason, kind=kind, code=code)

    def _finish(
        self,
        ok: bool,
        reason: str,
        idle: bool = False,
        kind: str = "upstream_error",
        code: int = 502,
    ) -> None:
        if self.ended:
            return
        self.end_reason = reason
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.ended = True
        self.ok = ok
        if self.committed and self.sse:
            if ok and not self.failed_inside and not self._done_seen():
                self.failed_inside = "truncated"
            if not ok:
                if idle:
                    kind, code = "upstream_idle_timeout", 504
                self._out.append(error_event(reason, kind, code))
            elif self._rest and self.strip_usage:
                self._out.append(self._rest)
                self._rest = b""
            self._ending = True
            self._write()
        if self.owner is not None:
            self.owner.relay_ended(ok)

    def _done_seen(self) -> bool:
        """Did the stream end with ``data: [DONE]`` (possibly split over the last two
        reads, or held back as a split event)?"""
        last = self._rest or self.tail
        if b"[DONE]" in last[-32:]:
            return True
        return b"[DONE]" in (self.tail_before[-32:] + last[-32:])

    def body(self) -> bytes:
        parts, self._parts = self._parts, []
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def cancel(self) -> None:
        """The client left: stop the upstream's work for it."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.conn.abort()
        if not self.ended:
            self.end_reason = "the client disconnected"
            self.ended = True
            self.ok = False
