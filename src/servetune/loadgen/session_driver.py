"""Sessions on one event loop: open-loop starts, closed-loop turns.

Sessions start at their planned times whatever the server does (as requests do in
:class:`~servetune.loadgen.driver.Driver`: no coordinated omission between sessions). Within a
session each turn depends on the answer before it, so turn k is *due* when turn k−1's
response has ended plus the think time, and its prompt is turn k−1's prompt + the answer as
the server returned it + the new user message. A turn's ``scheduled_ns`` is that due time, so
send lag and queue delay keep their meaning; with ``--max-concurrency`` a turn may wait for a
slot (``eligible_ns``).

The client keeps the conversation under its context cap as a client would: with ``truncate``
the oldest exchanges are left out (the system prompt stays) until prompt + max_tokens fits;
with ``end``, or when even the newest message does not fit, the session ends. A turn that
fails ends its session (a user does not go on from an answer that never came). Every request
carries the session id in the session header (when one is named) and in the body's ``user``.

A prompt's length is known once the server has counted it: the previous turn's
``usage.prompt_tokens`` + its answer's tokens + the new message's; before the first answer it
is the planned count. The template overhead the server's count shows is carried to later
estimates.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any, Literal

import orjson
from pydantic import BaseModel

from servetune.client.http import OpenAIClient
from servetune.loadgen.driver import Driver
from servetune.loadgen.sink import RecordSink
from servetune.results.record import RequestRecord


class SessionStyle(BaseModel):
    """How every session's requests are shaped (picklable: it goes to the workers)."""

    model: str
    chat: bool
    ignore_eos: bool = False
    temperature: float = 0.0
    header: str = "X-Session-ID"
    max_context: int | None = None
    on_overflow: Literal["truncate", "end"] = "truncate"


class PlannedSession:
    """A session as the driver needs it: id, start, first request id, system prompt, turns
    ``(user text, user tokens, max_tokens, think ns)``."""

    __slots__ = ("offset_ns", "rid0", "sid", "system", "system_tokens", "turns")

    def __init__(
        self,
        sid: str,
        offset_ns: int,
        rid0: int,
        system: str,
        system_tokens: int,
        turns: list[tuple[str, int, int, int]],
    ) -> None:
        self.sid = sid
        self.offset_ns = offset_ns
        self.rid0 = rid0
        self.system = system
        self.system_tokens = system_tokens
        self.turns = turns

    def __getstate__(self) -> tuple[Any, ...]:
        return (self.sid, self.offset_ns, self.rid0, self.system, self.system_tokens, self.turns)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        (self.sid, self.offset_ns, self.rid0, self.system, self.system_tokens, self.turns) = state


class _Conversation:
    """What a session has said so far, and its length in tokens."""

    __slots__ = ("answers", "dropped", "overhead", "session", "users")

    def __init__(self, s: PlannedSession) -> None:
        self.session = s
        self.users: list[tuple[str, int]] = []
        self.answers: list[tuple[str, int]] = []
        self.dropped = 0
        self.overhead = 0
        """Tokens the server counts beyond the text's (a chat template), from its usage."""

    def tokens_with(self, user_tokens: int) -> int:
        n = self.session.system_tokens + user_tokens + self.overhead
        for (_, u), (_, a) in zip(self.users, self.answers, strict=True):
            n += u + a
        return n

    def fit(self, user_tokens: int, max_tokens: int, style: SessionStyle) -> int | None:
        """The prompt's estimated length once under the cap (dropping the oldest exchanges
        with ``truncate``), or None when the session ends here."""
        n = self.tokens_with(user_tokens)
        cap = style.max_context
        if cap is None or n + max_tokens <= cap:
            return n
        if style.on_overflow == "end":
            return None
        while self.users and n + max_tokens > cap:
            (_, u), (_, a) = self.users.pop(0), self.answers.pop(0)
            n -= u + a
            self.dropped += 1
        return n if n + max_tokens <= cap else None

    def body(self, user: str, max_tokens: int, style: SessionStyle) -> bytes:
        s = self.session
        b: dict[str, Any] = {
            "model": style.model,
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": max_tokens,
            "temperature": style.temperature,
            "user": s.sid,
        }
        if style.ignore_eos:
            b["ignore_eos"] = True
        if style.chat:
            msgs: list[dict[str, str]] = []
            if s.system:
                msgs.append({"role": "system", "content": s.system})
            for (u, _), (a, _) in zip(self.users, self.answers, strict=True):
                msgs.append({"role": "user", "content": u})
                msgs.append({"role": "assistant", "content": a})
            msgs.append({"role": "user", "content": user})
            b["messages"] = msgs
        else:
            # turn k = turn k−1's prompt + its answer + "\n" + the new message
            parts = [s.system + "\n"] if s.system else []
            for (u, _), (a, _) in zip(self.users, self.answers, strict=True):
                parts.append(u)
                parts.append(a + "\n")
            parts.append(user)
            b["prompt"] = "".join(parts)
        return orjson.dumps(b)


class SessionDriver(Driver):
    """Starts each session on time and runs its turns one after another."""

    def __init__(
        self,
        client: OpenAIClient,
        items: Sequence[PlannedSession],
        sink: RecordSink,
        t0_ns: int,
        style: SessionStyle,
        max_concurrency: int | None = None,
        stop_after_ns: int | None = None,
    ) -> None:
        super().__init__(client, [], sink, t0_ns, max_concurrency, stop_after_ns)
        self.sessions = items
        self.style = style
        header = style.header
        self._header = header.encode("latin-1") if header else b""

    async def dispatch(self) -> None:
        """Start every session on time (returns when the last one has started)."""
        clock = time.perf_counter_ns
        loop = asyncio.get_running_loop()
        t0 = self.t0_ns
        deadline = None if self.stop_after_ns is None else t0 + self.stop_after_ns
        for s in self.sessions:
            due = t0 + s.offset_ns
            if deadline is not None and due >= deadline:
                break
            wait = due - clock()
            if wait > 0:
                await asyncio.sleep(wait / 1e9)
            task = loop.create_task(self._session(s, due, deadline))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def drain(self, timeout_s: float | None) -> None:
        """Wait for every session to end (``timeout_s`` is not applied: each request has its
        own timeout, and the waits between turns are the workload's)."""
        if self._tasks:
            await asyncio.wait(set(self._tasks))

    async def _session(self, s: PlannedSession, due: int, deadline: int | None) -> None:
        clock = time.perf_counter_ns
        client, style, stats, sem = self.client, self.style, self.stats, self.sem
        conv = _Conversation(s)
        hdr = self._header + b": " + s.sid.encode() + b"\r\n" if self._header else b""
        n_turns = len(s.turns)
        for k, (user, user_tokens, max_tokens, _think_ns) in enumerate(s.turns):
            if k:
                if deadline is not None and due >= deadline:
                    return  # due after the run's end (--duration): not sent, not waited for
                wait = due - clock()
                if wait > 0:
                    await asyncio.sleep(wait / 1e9)
            est = conv.fit(user_tokens, max_tokens, style)
            if est is None:
                return
            prepared = client.prepare(conv.body(user, max_tokens, style), hdr)
            eligible = due
            if sem is not None:
                if sem.locked():
                    await sem.acquire()
                    eligible = max(due, clock())
                else:
                    await sem.acquire()
            text: list[str] = []
            stats.sent += 1
            stats.inflight += 1
            try:
                rec: RequestRecord = await client.request(
                    s.rid0 + k, prepared, est, max_tokens, due, eligible, text
                )
            finally:
                if sem is not None:
                    sem.release()
                stats.inflight -= 1
            rec.session = s.sid
            rec.turn = k + 1
            rec.session_turns = n_turns
            rec.dropped_turns = conv.dropped or None
            self.sink.add(rec)
            stats.lags_ns.append(rec.send_ns - rec.eligible_ns)
            if rec.status != "ok":
                if rec.status == "failed":
                    stats.failed += 1
                else:
                    stats.cancelled += 1
                return
            stats.done += 1
            answer = text[0] if text else ""
            a_tokens = rec.output_tokens or 0
            if rec.prompt_tokens is not None:
                conv.overhead += rec.prompt_tokens - est
            conv.users.append((user, user_tokens))
            conv.answers.append((answer, a_tokens))
            if k + 1 < n_turns:
                due = self.t0_ns + rec.end_ns + s.turns[k + 1][3]
