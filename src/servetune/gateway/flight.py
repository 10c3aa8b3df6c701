"""One generation request after its checks: a slot, the upstream, the answer, the settlement.

A :class:`Flight` starts once the request has been checked and its quota reserved (see
:mod:`servetune.gateway.app`). It runs on callbacks, not on a task, whenever nothing has to
wait: with a free slot and an idle kept-alive connection, the request is sent from the
client's ``data_received`` and the answer passed on from the upstream's ``data_received``
(:class:`~servetune.gateway.relay.Relay` calls :meth:`Flight.head_in` and
:meth:`Flight.relay_ended`) — the two wake-ups any proxy hop costs, and no event-loop round
between them. Whatever must wait — a place in the fair queue, a new connection, a Redis round
trip, a retry that finds no free slot — waits in a task (the HTTP server's for the request, or
the flight's own for a retry) and hands back to the same callbacks. So there is one path,
whichever way a request gets through:

1. **slot** — ``Pool.try_acquire`` (charged to the fair queue), else a wait in the queue
   (429/503 past its deadline or bound: nothing was sent, the reservation is given back);
2. **send** — on an idle connection, else a new one; the first-byte deadline is watched by
   the gateway's one timer for all requests (:mod:`servetune.gateway.deadlines`);
3. **head** — a 500/502/503/504, a reset, a connect error or the deadline before the head
   count against the upstream's circuit — and, during a rollout, each is an error of the
   failing upstream's group for the canary, whatever the retry then gets — and are retried
   elsewhere (``retries``), never after;
   a reused connection that the server had closed is replaced once by a fresh one, which is
   not a failure (the bookkeeping: :mod:`servetune.gateway.failover`);
4. **answer** — a stream is committed at once and passed through as it arrives; a whole body
   is answered when it is in;
5. **end** — the breaker told, the connection back to the pool (kept alive) or closed, the
   slot freed, the reservation settled to the engine's usage, the fair queue charged the
   difference, metrics and the canary's observation recorded — exactly once, also when the
   client leaves (the upstream request is then closed so the engine aborts it). What is
   settled and recorded: :mod:`servetune.gateway.settle`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol

from servetune.gateway import quota as q
from servetune.gateway.canary import Observation
from servetune.gateway.checks import Prepared
from servetune.gateway.config import GatewayConfig
from servetune.gateway.deadlines import HeadDeadlines
from servetune.gateway.exposition import GatewayMetrics
from servetune.gateway.failover import RETRY_STATUSES, Tries
from servetune.gateway.heads import Heads
from servetune.gateway.pool import Pool, QueueRefusal, Router, Upstream
from servetune.gateway.refusals import queue_refused, retry_after
from servetune.gateway.relay import Relay, UpstreamLost
from servetune.gateway.requests import InputCounter, error_body
from servetune.gateway.route_key import RequestRoute
from servetune.gateway.seat import Seat
from servetune.gateway.settle import Attempt, record, stream_usage, tokens_used, usage_from_json
from servetune.gateway.tenants import TenantRuntime
from servetune.gateway.upstream import ConnectionPool, UpstreamConnection
from servetune.http import Exchange

log = logging.getLogger("servetune.gateway")


class Host(Protocol):
    """What a flight uses of its gateway (:class:`~servetune.gateway.app.Gateway`)."""

    cfg: GatewayConfig
    metrics: GatewayMetrics
    head_deadlines: HeadDeadlines
    heads: Heads
    router: Router
    pools: dict[str, Pool]
    counters: dict[str, InputCounter]
    default_counter: InputCounter
    canary_step: Callable[[], int | None]
    observe: Callable[[Observation], None]
    streams: set[Flight]
    """Streams committed and not ended (cut with an error event at shutdown)."""

    def healthy_groups(self) -> dict[str, bool] | None: ...

    def conn_pool(self, u: Upstream) -> ConnectionPool: ...


class Flight:
    __slots__ = (
        "_finished",
        "_reused",
        "_shut",
        "_task",
        "att",
        "ended",
        "ex",
        "group",
        "gw",
        "prep",
        "relay",
        "res",
        "seat",
        "settle_now",
        "step",
        "tenant",
        "tries",
        "upstream",
        "used",
    )

    def __init__(
        self,
        gw: Host,
        ex: Exchange,
        tenant: TenantRuntime,
        prep: Prepared,
        res: q.Reservation | None,
        settle_now: Callable[[q.Reservation, int | None], None] | None,
    ) -> None:
        self.gw = gw
        self.ex = ex
        self.tenant = tenant
        self.prep = prep
        self.res = res
        self.settle_now = settle_now
        """Settles the reservation at the end (in-memory quota); None: the caller awaits the
        store's settle with :attr:`used` (Redis)."""
        self.att = Attempt()
        self.step = gw.canary_step()
        self.group = ""
        self.seat = Seat(tenant, prep.reserve, RequestRoute(ex, prep.body))
        self.upstream: Upstream | None = None
        self.relay: Relay | None = None
        self.tries: Tries | None = None
        """Made at the request's first failure (most requests have none)."""
        self.ended = False
        self.used = 0
        self._task: asyncio.Task[None] | None = None
        self._finished: asyncio.Future[None] | None = None
        self._reused = False
        self._shut = False

    # -- starting ----------------------------------------------------------------------------
    def start(self) -> Awaitable[None] | None:
        """Send now (None: the flight goes on by callbacks) or return the coroutine that waits
        for a slot or a connection first (the HTTP server runs it as the request's task)."""
        try:
            gw = self.gw
            self.group = gw.router.pick(gw.healthy_groups())
            u = self.seat.take(gw.pools[self.group])
            if u is None:
                return self._wait_then_send(None)
            conn = gw.conn_pool(u).take()
            if conn is None:
                return self._wait_then_send(u)
            self._send(u, conn, True)
            return None
        except Exception:
            self._crash()
            return None

    async def run(self) -> None:
        """The whole flight inside the caller's task (a Redis-backed gateway awaits its
        reservation first, and its settlement after)."""
        waits = self.start()
        try:
            if waits is not None:
                await waits
            else:
                await self._until_ended()
        except asyncio.CancelledError:
            self.client_left()
            raise

    async def _wait_then_send(self, u: Upstream | None) -> None:
        try:
            if u is None:
                u = await self._first_slot()
                if u is None:
                    return
            await self._connect_send(u)
            await self._until_ended()
        except asyncio.CancelledError:
            self.client_left()
            raise

    async def _first_slot(self) -> Upstream | None:
        gw = self.gw
        try:
            return await self.seat.wait(gw.cfg.queue.max_queued, gw.metrics)
        except QueueRefusal as exc:
            # counted by the refusal; att.code stays 0 so that record does not count it again
            queue_refused(gw.metrics, self.ex, self.tenant.name, exc)
            self._end()
            return None

    async def _connect_send(self, u: Upstream) -> None:
        """A connection to ``u`` (an idle one, else a new one), then the send."""
        try:
            conn, reused = await self.gw.conn_pool(u).get()
        except (OSError, TimeoutError) as exc:
            self.upstream = u
            self._failed(f"connect to {u.host}:{u.port} failed ({exc or 'timeout'})", "connect")
            return
        if self.ended:
            conn.abort()
            return
        self._send(u, conn, reused)

    async def _until_ended(self) -> None:
        if self.ended:
            return
        if self._finished is None:
            self._finished = asyncio.get_running_loop().create_future()
        await self._finished

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Wait in a task of the flight's own (a retry after the request was sent)."""

        async def guarded() -> None:
            try:
                await coro
            except asyncio.CancelledError:
                raise
            except Exception:
                self._crash()
            finally:
                self._task = None

        self._task = asyncio.get_running_loop().create_task(guarded())

    # -- sending -----------------------------------------------------------------------------
    def _send(self, u: Upstream, conn: UpstreamConnection, reused: bool) -> None:
        gw = self.gw
        self.upstream = u
        self._reused = reused
        relay = self.relay = Relay(
            self.ex, conn, self.prep.strip_usage, gw.cfg.timeouts.idle_s, self
        )
        self.ex.on_close = self.client_left
        relay.last_ns = time.perf_counter_ns()
        conn.send(gw.heads.request(u, self.ex.path, self.prep.payload), relay)
        gw.head_deadlines.add(relay)

    # -- the relay's callbacks ---------------------------------------------------------------
    def head_in(self) -> None:
        """The upstream's response head: retry elsewhere (a 5xx with tries left) or commit."""
        try:
            relay = self.relay
            assert relay is not None
            self.gw.head_deadlines.discard(relay)
            if relay.status in RETRY_STATUSES and self._tries().attempts < self.gw.cfg.retries:
                relay.conn.abort()
                self._failed(f"HTTP {relay.status}", "status")
                return
            # committed to this upstream's answer
            att = self.att
            att.sent_ns = relay.last_ns or time.perf_counter_ns()
            att.code = relay.status
            if relay.sse:
                head = self.gw.heads.stream(self.group)
                self.gw.streams.add(self)  # told if the gateway stops before the stream ends
                relay.commit_stream(head + self.prep.headers if self.prep.headers else head)
        except Exception:
            self._crash()

    def head_failed(self, exc: Exception) -> None:
        """No head: the connection was lost (or answered garbage) or the deadline passed."""
        try:
            relay = self.relay
            assert relay is not None and self.upstream is not None
            self.gw.head_deadlines.discard(relay)
            relay.conn.abort()
            if isinstance(exc, UpstreamLost):
                idle_s = (relay.last_ns - relay.conn.idle_since_ns) / 1e9
                if self._tries().fresh_once(self._reused, idle_s):
                    # an idle connection the server had closed: once more, fresh (not a failure)
                    self.relay = None
                    u = self.upstream
                    conn = self.gw.conn_pool(u).take()
                    if conn is not None:
                        self._send(u, conn, True)
                    else:
                        self._spawn(self._connect_send(u))
                    return
                self._failed(exc.detail, "reset")
            else:
                self._failed(
                    f"no response head within {self.gw.cfg.timeouts.first_byte_s:g} s", "timeout"
                )
        except Exception:
            self._crash()

    def _failed(self, error: str, kind: str) -> None:
        """Failed before the first byte: count it, free the slot, try another upstream (after
        a timeout only one that has not had the request: see
        :mod:`~servetune.gateway.failover`)."""
        gw, u, tries = self.gw, self.upstream, self._tries()
        assert u is not None
        self.relay = None
        retries = gw.cfg.retries
        if (
            kind == "timeout"
            and not self.prep.stream
            and not any(x is not u and x not in tries.tried for x in gw.pools[self.group].upstreams)
        ):
            # a whole answer's head comes with its end: the engine is generating it, and
            # sending it there again doubles its work; only another engine may be tried
            retries = tries.attempts
        again = tries.failed(u, error, gw.metrics, retries, kind)  # the breaker told first
        if self.step is not None:
            # the canary's error, charged to the group of the upstream that failed this try
            # (whatever happens on the next): a retried 5xx, reset or timeout is still the
            # failing upstream's failure
            gw.observe(Observation(u.group, self.step, None, None, None, True))
        self.seat.release()
        if not again:
            self._give_up()
            return
        nxt = self.seat.retake(tries.tried)
        if nxt is not None and not self.prep.stream and tries.timed_out(nxt):
            self.seat.release()
            nxt = None  # the other upstreams are busy: wait for one of them, not this one
        if nxt is None:
            self._spawn(self._retry_slot())
            return
        conn = gw.conn_pool(nxt).take()
        if conn is None:
            self._spawn(self._connect_send(nxt))
        else:
            self._send(nxt, conn, True)

    def _give_up(self) -> None:
        tries = self._tries()
        code = 504 if tries.last_kind == "timeout" else 502
        self.att.code = code
        self.att.error = True
        self.ex.respond(code, tries.exhausted())
        self._end()

    def _tries(self) -> Tries:
        t = self.tries
        if t is None:
            t = self.tries = Tries()
        return t

    async def _retry_slot(self) -> None:
        tries = self._tries()
        try:
            u = await self.seat.rewait(self.gw.cfg.queue.max_queued, tries.tried)
        except QueueRefusal as exc:
            self.att.code = 503
            self.att.error = True
            self.ex.respond(503, tries.no_slot(exc), headers=retry_after(exc.retry_after_s))
            self._end()
            return
        if not self.prep.stream and tries.timed_out(u):
            self.seat.release()
            self._give_up()
            return
        await self._connect_send(u)

    def relay_ended(self, ok: bool) -> None:
        """The committed answer is complete (ok) or was cut, timed out idle."""
        try:
            relay, u, att, ex = self.relay, self.upstream, self.att, self.ex
            assert relay is not None and u is not None
            if not relay.sse:
                if ok:
                    ctype = next(
                        (v for k, v in relay.headers if k == b"content-type"), b"application/json"
                    )
                    data = relay.body()
                    ex.respond(
                        relay.status,
                        data,
                        ctype,
                        [(b"x-servetune-group", self.group.encode()), *self.prep.headers],
                    )
                    usage_from_json(data, att)
                else:
                    att.code = 502
                    ex.respond(502, error_body(relay.end_reason, "upstream_error", "upstream_cut"))
            if self._shut:
                u.breaker.neutral()  # cut by the gateway's shutdown: nobody's failure
            elif relay.status >= 500 or not ok:
                u.breaker.failure()
                att.error = True
            else:
                u.breaker.success()
                if relay.failed_inside:  # an error event, or no [DONE]: failed inside its 200
                    att.error = True
                    self.gw.metrics.failures[(u.url, relay.failed_inside)] += 1
            if relay.sse:
                self._settle_stream(relay)
            if ok and relay.conn.keep:
                self.gw.conn_pool(u).put(relay.conn)
            else:
                relay.conn.abort()
            self.seat.release(served=True)
            self._end()
        except Exception:
            self._crash()

    def shutdown_cut(self) -> None:
        """The gateway stops and this stream is still open past the drain: end it with an
        error event the client can read (``gateway_shutdown``, 503), settled as it stands."""
        relay = self.relay
        if self.ended or relay is None or not relay.committed:
            return
        self._shut = True
        relay.end_with_error(
            "the gateway is shutting down: the stream was cut before its end; retry the request",
            "gateway_shutdown",
            503,
        )

    # -- the client leaves, the end --------------------------------------------------------
    def client_left(self) -> None:
        """The client went away: close the upstream request (the engine aborts it)."""
        if self.ended:
            return
        task = self._task
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        relay = self.relay
        if relay is not None:
            self.gw.head_deadlines.discard(relay)
            relay.cancel()
            assert self.upstream is not None
            self.upstream.breaker.neutral()
            if self.att.sent_ns:  # its answer had begun
                self.att.code = 499
                self._settle_stream(relay)
                self.seat.release(served=True)
            else:
                self.att.unanswered = True
                self.seat.release()
        else:
            self.seat.release()
        self._end()

    def _crash(self) -> None:
        """A bug in the gateway (logged): answer 500 (or cut the stream), free everything."""
        log.exception("gateway: request failed")
        if self.ended:
            return
        ex = self.ex
        if not ex.responded:
            ex.respond(500, error_body("internal gateway error", "server_error", None))
        elif not ex.finished:
            ex.abort()
        if self.relay is not None:
            self.relay.cancel()
        self.att.error = True
        self.seat.release()
        self._end()

    def _settle_stream(self, relay: Relay) -> None:
        gw = self.gw
        stream_usage(self.att, relay, self.prep, self.group, gw.counters, gw.default_counter)

    def _end(self) -> None:
        """Settle and record, exactly once."""
        if self.ended:
            return
        self.ended = True
        self.gw.streams.discard(self)
        # no reference cycle left behind (flight <-> relay, flight <-> exchange): freed by
        # reference counting, not by the cyclic collector (a pause of ~10 ms every few
        # hundred requests when they were left)
        self.ex.on_close = None
        if self.relay is not None:
            self.gw.head_deadlines.discard(self.relay)
            self.relay.owner = None
        att, prep, tenant = self.att, self.prep, self.tenant
        used = tokens_used(att, prep)
        self.used = used
        if self.res is not None and self.settle_now is not None:
            self.settle_now(self.res, used)
        if att.sent_ns:
            self.seat.settle(used)
        gw = self.gw
        record(
            gw.metrics,
            gw.observe,
            tenant.name,
            self.group,
            att,
            self.ex.arrival_ns,
            prep.n_in,
            self.step,
        )
        fut = self._finished
        if fut is not None and not fut.done():
            fut.set_result(None)
