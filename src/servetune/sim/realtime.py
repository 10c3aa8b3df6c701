"""The simulated engine on the wall clock: step, wait for the step's simulated end, write.

The engine core (:mod:`servetune.sim.engine`) runs on ``perf_counter`` (uvloop's
``loop.time()`` counts whole milliseconds): a step starts, its duration comes from the
step-time model, the bytes of every token of the step are built while its simulated time
runs, and at the step's end only the writes are left — one per stream per step (a vLLM
server too emits one chunk per request per step), sent by the :class:`StepWriter`.

Generation requests wait in :attr:`RealtimeEngine.intake` until the loop takes them in, in the
waits between steps (they could not join a running step anyway), so that reading a burst of
prompts (JSON, counting) never delays a write. After each step's writes the live objects are
frozen out of the garbage collector (O(1)), so no collection scans the whole server
mid-step; the full collection runs when the engine is idle. :class:`LoopStats` keeps the
emission lag and where it comes from.

vLLM's API server stands in front of the engine as in the virtual-clock run
(:class:`~servetune.sim.frontend.ApiServer`, the same constants): a request reaches the engine
after the server's loop has taken it in (serial, per request), and a step's tokens reach the
clients after the loop has processed them (per token) plus the fixed latency from the engine to
the client. The latency is applied on the way in (a request sent at ``t`` is on the engine
after the intake and the latency; its record's arrival on the engine's clock is ``t +
latency``), so a step's writes are due at its end unless the loop is behind with outputs — one
write per step, no delay line. TTFT, E2E and the gaps a client sees are then those of ``sim
run`` for the same requests. (One difference: a step's outputs are booked on the API server
when the step is computed, so with a per-token cost a request sent during a long step but read
after it can wait behind that step's outputs.)

While the engine is busy its steps follow one another on its own clock (as in the model): the
loop's own work between steps (writing, reading requests) does not lengthen them. A loop that
falls behind its writes by more than :data:`CATCH_UP_S` (a loaded host, a stall) moves the
engine's clock on by as much, so that a host too slow for the model slows the engine down
instead of piling up a backlog.

Where the bytes go is opaque here (``Stream.out``): the HTTP side
(:mod:`servetune.sim.server`) passes its exchanges in and answers refusals.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import math
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from servetune.arch.memory import MemoryPlan
from servetune.http import Exchange
from servetune.sim.engine import DONE, SimRequest
from servetune.sim.frontend import ApiServer, SharedIntake
from servetune.sim.intake import Refusal, block_hashes, json_object, read_request
from servetune.sim.loop_stats import LoopStats
from servetune.sim.policies import make_engine
from servetune.sim.resolved import ResolvedConfig
from servetune.sim.step_writer import CHUNK, LAST, WHOLE, StepWriter, Write, WriterMode
from servetune.sim.streams import TOKEN_WORDS, Stream

SPIN_S = 0.004
"""Wake this long before a step ends and sleep the rest precisely (uvloop's timers fire in
whole milliseconds, and the loop's callbacks can run late: with 2 ms the loop thread reached
the step's end 1.4–3 ms late at its p99 under 128 req/s, with 4 ms 0.25–0.6 ms)."""
INTAKE_S = 0.002
"""Take requests in for at most this long at a time between steps."""
CATCH_UP_S = 0.005
"""A write later than this behind its due time moves the engine's clock on by the lateness
(below it, the steps stay back to back on the engine's clock: the loop's own work between
steps is not the engine's)."""

_SSE_HEADERS = [(b"Cache-Control", b"no-cache")]


def answer_keys(
    pieces: list[str], hashes: tuple[int, ...], block: int, first_word: int
) -> Callable[[int], tuple[int, ...]]:
    """``more_keys`` of a request (:class:`~servetune.sim.engine.SimRequest`): the hashes of
    the full blocks after its prompt's, made of the prompt's last pieces and the words the
    stream sends (:class:`~servetune.sim.streams.Stream`: word ``first_word + i`` is token i),
    as the next turn of a conversation, holding this answer, will hash them."""
    tail = pieces[len(hashes) * block :]
    h0 = hashes[-1] if hashes else 0
    words = TOKEN_WORDS
    nw = len(words)

    def more(n: int) -> tuple[int, ...]:
        need = n * block - len(tail)
        answer = [words[(first_word + i) % nw] for i in range(max(0, need))]
        return block_hashes(tail + answer, block, h0)[:n]

    return more


class RealtimeEngine:
    """The engine, its clock, its intake queue and its writer."""

    def __init__(self, r: ResolvedConfig, mem: MemoryPlan, writer: WriterMode = "plain") -> None:
        self.r = r
        self.model = r.served_model_name
        self.names = {self.model, r.model.name, r.model.name.split("/")[-1]}
        self.eng = make_engine(r, mem)
        self.stats = LoopStats()
        self.writer = StepWriter(writer)
        self.intake: deque[tuple[Exchange, bool]] = deque()
        """Generation requests not read yet: (exchange, chat)."""
        eff = self.eng.model.eff
        self.api = ApiServer(
            round(eff.frontend_per_request_ms * 1e6), 0, round(eff.frontend_per_token_us * 1e3)
        )
        """vLLM's API server on the wall clock (ns since :attr:`t0`); its latency is
        :attr:`latency` (applied on the way in)."""
        self.render = SharedIntake(round(eff.frontend_chat_per_request_ms * 1e6))
        """The chat template stage a burst shares (wall clock ns since :attr:`t0`)."""
        self.rendering: deque[SimRequest] = deque()
        """Chat requests in :attr:`render`, oldest first (they leave in order)."""
        self.chat_token_ns = round(eff.frontend_chat_per_token_us * 1e3)
        self.latency = eff.frontend_latency_ms / 1e3
        """Seconds from a token's step end to its client: the engine's clock runs this far
        ahead of the wall clock."""
        self.arriving: deque[tuple[float, SimRequest]] = deque()
        """Requests the API server has not handed to the engine yet: (engine time, request)."""
        self.t0 = time.perf_counter()
        self._ids = itertools.count()
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    def clock(self) -> float:
        """The engine's clock: seconds since start."""
        return time.perf_counter() - self.t0

    # -- life -----------------------------------------------------------------------------
    def start(self) -> None:
        self._wake = asyncio.Event()
        self.stats.watch_gc()
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def close(self) -> None:
        self.stats.unwatch_gc()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        self.writer.close()

    # -- requests -------------------------------------------------------------------------
    def queue(self, ex: Exchange, chat: bool) -> None:
        """A generation request came in: read between steps (at once when idle)."""
        self.intake.append((ex, chat))
        if self._wake is not None and self.eng.idle():
            self._wake.set()

    def take_intake(self, until: float = math.inf) -> None:
        """Read the queued generation requests, while ``perf_counter() < until``."""
        perf = time.perf_counter
        while self.intake and perf() < until:
            ex, chat = self.intake.popleft()
            if not ex.conn.closed:
                self.submit(ex, chat)

    def submit(self, ex: Exchange, chat: bool) -> None:
        """Read one generation request: refuse it (as vLLM would), or add it to the engine."""
        body = json_object(ex.body)
        ask = (
            body
            if isinstance(body, Refusal)
            else read_request(body, chat, self.names, self.r.max_model_len)
        )
        if isinstance(ask, Refusal):
            ex.error(ask.status, ask.message, ask.type)
            return
        rid_n = next(self._ids)
        r = self.r
        hashes: tuple[int, ...] = ()
        more = None
        if r.enable_prefix_caching:
            hashes = block_hashes(ask.pieces, r.block_size)
            more = answer_keys(ask.pieces, hashes, r.block_size, rid_n * 7)
        sent_ns = ex.arrival_ns - round(self.t0 * 1e9)  # its first byte, on the wall clock
        req = SimRequest(
            rid_n,
            ask.prompt_len,
            ask.max_tokens,
            sent_ns / 1e9 + self.latency,
            hashes,
            more_keys=more,
        )
        rid = ("chatcmpl-" if chat else "cmpl-") + f"{rid_n:x}"
        s = Stream(ex, req, rid, self.model, chat, ask.stream, ask.include_usage)
        req.tag = s
        ex.on_close = lambda: self.abort(s)  # a cycle ex -> s -> ex until the stream ends
        if ask.stream:
            ex.start(200, headers=_SSE_HEADERS)  # the head now, as vLLM sends it
        render = self.render
        if chat and render.per_request_ns:
            # the template first, shared by the burst; the intake when it leaves (_rendered)
            self.api.reserve(sent_ns, render.per_request_ns)
            render.arrive(max(sent_ns, render.now_ns))
            self.rendering.append(req)
        else:
            self._take_in(req, sent_ns)
        assert self._wake is not None
        self._wake.set()

    def _take_in(self, req: SimRequest, at_ns: int) -> None:
        """The API server's intake proper (one by one) from ``at_ns`` (wall clock ns)."""
        at_engine = self.api.accept(at_ns) / 1e9 + self.latency
        self.arriving.append((at_engine, req))  # in order: the intake is one FIFO

    def _rendered(self, upto_ns: int) -> None:
        """Chat requests whose template was rendered by ``upto_ns`` go on to the intake (only
        up to the wall clock: a later arrival would still share the stage)."""
        now_ns = round((time.perf_counter() - self.t0) * 1e9)
        for d in self.render.depart_until(min(upto_ns, now_ns)):
            self._take_in(self.rendering.popleft(), d)

    def abort(self, s: Stream) -> None:
        """The client went away: the request leaves the engine (``finished_reason=abort``)."""
        if s.closed:
            return
        if s.req.state != DONE:
            self.eng.abort(s.req)
        self._ended(s)

    # -- the loop -------------------------------------------------------------------------
    async def _loop(self) -> None:
        """Step, then wait for the step's outputs to be due, then write them.

        Requests are read in the wait (they join the step that starts after the API server
        hands them over, as in vLLM) or, when the engine has nothing to do, at once. After
        each step's writes the objects alive are frozen out of the garbage collector
        (``gc.freeze`` is O(1)), so that a collection never scans the server's whole state in
        the middle of a step; the full collection runs when the engine goes idle.
        """
        eng, stats, writer, arriving = self.eng, self.stats, self.writer, self.arriving
        assert self._wake is not None
        wake = self._wake
        perf = time.perf_counter
        t0 = self.t0
        while True:
            if eng.idle() and not arriving:
                if self.intake:
                    self.take_intake()
                    continue
                if self.rendering:
                    # wait for the first template to be rendered (a new request wakes us:
                    # it shares the stage, so the departure moves)
                    nd = self.render.next_departure()
                    assert nd is not None
                    delay = t0 + nd / 1e9 - perf()
                    if delay > 0:
                        wake.clear()
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(wake.wait(), delay)
                    else:  # the wall clock is past it: it leaves (+1 ns: rounding)
                        for d in self.render.depart_until(nd + 1):
                            self._take_in(self.rendering.popleft(), d)
                    continue
                stats.idle_gc = True
                gc.unfreeze()
                gc.collect()
                gc.freeze()
                stats.idle_gc = False
                wake.clear()
                await wake.wait()
                continue
            if self.intake:
                # a backlog is taken in a little at a time: the engine keeps stepping
                self.take_intake(perf() + INTAKE_S)
            if self.rendering:
                self._rendered(round((eng.now - self.latency) * 1e9))
            if eng.idle() and not arriving:
                continue
            if eng.idle():
                # idle until the API server hands the next request over: the engine's clock
                # jumps there (every request that could join that step has been sent)
                eng.now = max(eng.now, arriving[0][0])
            while arriving and arriving[0][0] <= eng.now:
                req = arriving.popleft()[1]
                if req.state != DONE:  # not aborted while in the API server
                    eng.add(req)
            if eng.idle():
                continue
            t = perf()
            emitted = eng.advance(collect=True)
            if eng.finished:
                eng.finished.clear()
            # Build every write of this step while its simulated time runs, so that at the
            # step's end only the writes are left.
            writes, service_ns = self._build(emitted)
            # the step's outputs through the API server (its clock is the wall clock's), after
            # the templates rendered before the step's end (the loop's jobs in time order)
            end_ns = round((eng.now - self.latency) * 1e9)
            if self.rendering:
                self._rendered(end_ns)
            due = t0 + self.api.deliver(end_ns, service_ns) / 1e9 + self.latency
            writer.arm(writes, due)
            stats.phase("step_and_build", perf() - t)
            if self.intake:
                self.take_intake(due - SPIN_S - INTAKE_S)
            delay = due - perf()
            if delay > SPIN_S:
                await asyncio.sleep(delay - SPIN_S)
                stats.phase("coarse_sleep_late", perf() - (due - SPIN_S))
            if writes:
                writer.hold_cpu()
            rest = due - perf()
            if rest > 0:
                time.sleep(rest)
                stats.phase("fine_sleep_late", perf() - due)
            late = perf() - due
            if late > CATCH_UP_S:
                eng.now += late  # the host could not keep up: the engine waited for it
            if writes:
                self._write(writes, due)
                gc.freeze()
            else:
                await asyncio.sleep(0)

    def _build(self, emitted: list[SimRequest]) -> tuple[list[Write], int]:
        """(exchange, bytes, kind) for every token of a step, and what the tokens cost the
        API server's loop (ns)."""
        out: list[Write] = []
        per_token, chat_token = self.api.per_token_ns, self.chat_token_ns
        service = 0
        for req in emitted:
            s: Stream | None = req.tag  # type: ignore[assignment]
            if s is None or s.closed:
                continue
            service += per_token + chat_token if s.chat else per_token
            ex: Exchange = s.out
            last = req.state == DONE
            if not s.stream:
                s.sent += 1
                if last:
                    req.out = s.sent
                    out.append((ex, s.full_body(self.model), WHOLE))
                    self._ended(s)
                continue
            data = s.token_bytes(last)
            if last:
                out.append((ex, ex.frame(data + s.closing_bytes(), last=True), LAST))
                self._ended(s)
            else:
                out.append((ex, ex.frame(data), CHUNK))
        return out, service

    def _write(self, writes: list[Write], target: float) -> None:
        """Send a step's writes, end the streams they finish, note the lags."""
        t_start = time.perf_counter()
        stamps, first, side_start = self.writer.send(writes, t_start)
        for ex, _, kind in writes:
            if kind == LAST:
                ex.complete()
        self.stats.step_written(stamps, target, t_start, first, side_start)

    @staticmethod
    def _ended(s: Stream) -> None:
        """The engine is done with ``s`` (its last bytes are built): break the references
        between request, stream and exchange, so that reference counting frees them — a
        cycle would wait for a collection, and the step loop freezes what is alive."""
        s.closed = True
        s.out.on_close = None
        s.req.tag = None

    # -- read-outs ------------------------------------------------------------------------
    def report(self) -> dict[str, Any]:
        """``/sim/stats``: the loop's figures and the engine's state."""
        c = self.eng.counters
        return {
            **self.stats.report(),
            "writer": self.writer.name,
            "steps": c.steps,
            "generation_tokens": c.generation_tokens,
            "preemptions": c.preemptions,
            "running": self.eng.num_running,
            "waiting": self.eng.num_waiting,
            "kv_cache_usage": self.eng.pool.usage,
            "engine_busy_s": self.eng.busy_s,
            "uptime_s": self.clock(),
        }
