"""Upstreams, their admission limits, and the wait for a free slot.

A *group* (:class:`Pool`) is a set of interchangeable upstream URLs. Each upstream admits up to
its limit of requests at once — the lowest of

- the configured (or swept, ``--from-sweep``) comfortable concurrency,
- the adaptive limit that tightens on the upstream's own signals
  (:mod:`servetune.gateway.admission`), and
- this replica's share when several gateway replicas front the same upstream
  (``ceil(limit / live replicas)``).

A request takes the least-loaded upstream with a free slot whose circuit is not open. When
none has one it waits in the group's :class:`~servetune.gateway.fairqueue.FairQueue` until a
slot frees (in fair order) or its deadline passes.

**Headroom for the higher priority classes** (``queue.priority_headroom``, *h*): while a
request of a higher class than its own is running in the group or waiting in its queue, a
request may take a slot of an upstream only if more than *h* of its slots are free — the last
*h* free slots of each upstream are kept for the higher classes. When no higher-class request
is active the lower classes use every slot (nothing is held back from an idle class). A slot
held back this way is not a refusal: the request waits in the queue like any other, and is
sent as soon as a slot beyond the headroom frees or the higher classes fall idle. Why: fair
queueing orders *waiting* requests, but cannot take back a slot a bulk request already holds;
an interactive tenant arriving in a burst then waits for its own earlier requests even though
the bulk tenant is within its quota (the M/D/c arithmetic in ``benchmarks/gateway_overhead.py``).
The headroom makes those waits rare at the cost of up to *h* slots per upstream for the lower
classes, and only while a higher class is active. :class:`Router` spreads requests over the
groups by weight (smooth weighted round robin: exact shares, no randomness), which is how a
canary gets its 5 % of traffic.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Literal
from urllib.parse import urlsplit

from servetune.gateway.breaker import Breaker
from servetune.gateway.fairqueue import FairQueue, Waiter
from servetune.gateway.route_key import RequestRoute
from servetune.gateway.shares import TenantShares
from servetune.results import server_series as ss
from servetune.routing.config import RoutingConfig
from servetune.routing.policies import Balancer, load_share

_WAITING, _KV, _RUNNING = ss.WAITING, ss.KV_CACHE_USAGE, ss.RUNNING
QueueReason = Literal["queue_full", "queue_timeout", "no_upstream"]


class QueueRefusal(Exception):
    def __init__(self, reason: QueueReason, retry_after_s: float, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.retry_after_s = retry_after_s
        self.message = message


class Upstream:
    """One engine endpoint (a base URL ending in /v1)."""

    def __init__(self, url: str, group: str, limit: int | None, breaker: Breaker) -> None:
        self.url = url
        self.group = group
        parts = urlsplit(url)
        self.scheme = parts.scheme
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path.rstrip("/")[: -len("/v1")] if parts.path.endswith("/v1") else ""
        self.origin = f"{parts.scheme}://{parts.netloc}"
        self.configured: int | None = limit
        self.adaptive: int | None = limit
        self.share: int | None = limit
        self.limit: int | None = limit
        self.inflight = 0
        self.breaker = breaker
        self.signals: dict[str, float] = {}
        """The last live signals read from its /metrics (waiting, kv_cache_usage, ...)."""

    def recompute(self) -> None:
        vals = [v for v in (self.configured, self.adaptive, self.share) if v is not None]
        self.limit = max(1, min(vals)) if vals else None

    def has_slot(self) -> bool:
        return self.limit is None or self.inflight < self.limit


@dataclass
class Slot:
    """What :meth:`Pool.acquire` hands out: an upstream and how long the request waited."""

    upstream: Upstream
    queued_s: float


class Pool:
    """One group: its upstreams and the fair queue in front of them."""

    def __init__(
        self,
        name: str,
        upstreams: list[Upstream],
        classes: int,
        headroom: int = 0,
        routing: RoutingConfig | None = None,
        share_window_s: float = 0.0,
        share_cap: int | None = None,
        share_burst: int = 0,
        share_quantile: float = 0.99,
    ) -> None:
        self.name = name
        self.upstreams = upstreams
        self.routing = routing or RoutingConfig()
        self.balancer = Balancer(self.routing, [u.url for u in upstreams])
        """The group's routing policy and its state (prefix indexes, round-robin position)."""
        self.session_header = self.routing.session_header.lower().encode()
        self.routes: dict[tuple[str, str], int] = {}
        """Choices so far by (upstream URL, reason): the gateway's /metrics."""
        self.on_rebalance: Callable[[Pool, RequestRoute | None], None] | None = None
        self.queue = FairQueue(classes)
        self.headroom = headroom
        """Slots of each upstream kept for the higher priority classes while one is active."""
        self.running = [0] * max(1, classes)
        """Requests holding a slot in this group, per priority class."""
        self.shares = TenantShares(share_window_s, share_cap, share_burst, share_quantile)
        """Each active tenant's share of the slots (:mod:`servetune.gateway.shares`)."""
        self.service_ewma_s = 1.0
        self._wake: asyncio.TimerHandle | None = None

    # -- choosing ----------------------------------------------------------------------------
    def _free(
        self, avoid: Iterable[Upstream] = (), keep: int = 0, route: RequestRoute | None = None
    ) -> Upstream | None:
        """The upstream the group's routing policy picks among those with more than ``keep``
        free slots and a circuit that lets a request through (one in ``avoid`` only when there
        is no other)."""
        ups = self.upstreams
        avoided = tuple(avoid)
        b = self.balancer
        if b.policy == "least-loaded":  # the default: one pass, nothing allocated
            best: Upstream | None = None
            best_load = math.inf
            spare: Upstream | None = None
            for u in ups:
                lim = u.limit
                if (lim is not None and u.inflight + keep >= lim) or not u.breaker.would_allow():
                    continue
                if avoided and u in avoided:
                    if spare is None:
                        spare = u
                    continue
                load = load_share(u.inflight, lim)
                if load < best_load:
                    best, best_load = u, load
            got = best or spare
            if got is not None:
                key = (got.url, "least_loaded")
                self.routes[key] = self.routes.get(key, 0) + 1
            return got
        eligible: list[int] = []
        fallback: int | None = None
        for i, u in enumerate(ups):
            lim = u.limit
            if (lim is not None and u.inflight + keep >= lim) or not u.breaker.would_allow():
                continue
            if avoided and u in avoided:
                if fallback is None:
                    fallback = i
                continue
            eligible.append(i)
        if not eligible:
            if fallback is None:
                return None
            eligible.append(fallback)
        if route is not None:
            route.header = self.session_header
        inflight = [u.inflight for u in ups]
        limits = [u.limit for u in ups]
        if b.policy in ("least-loaded", "round-robin"):
            healthy: list[int] = []
        else:
            healthy = [i for i, u in enumerate(ups) if u.breaker.would_allow()]
        depth: list[float] = []
        kv: list[float | None] = []
        running: list[float | None] = []
        if b.uses_signals:
            for u in ups:
                sig = u.signals
                depth.append(sig.get(_WAITING, 0.0))
                kv.append(sig.get(_KV))
                running.append(sig.get(_RUNNING))
        i = b.choose(route, eligible, inflight, limits, healthy, depth, kv, running)
        u = ups[i]
        key = (u.url, b.reason)
        self.routes[key] = self.routes.get(key, 0) + 1
        if b.reason == "rebalanced" and self.on_rebalance is not None:
            self.on_rebalance(self, route)
        return u

    def healthy(self) -> bool:
        return any(u.breaker.would_allow() for u in self.upstreams)

    def capacity(self) -> float:
        return sum(u.limit if u.limit is not None else math.inf for u in self.upstreams)

    def inflight(self) -> int:
        return sum(u.inflight for u in self.upstreams)

    def _keep(self, priority: int) -> int:
        """Free slots a request of class ``priority`` must leave on an upstream: the headroom
        while a higher class has a request running or waiting, else none."""
        if not priority or not self.headroom:
            return 0
        running = self.running
        if any(running[:priority]) or self.queue.head_class() < priority:
            return self.headroom
        return 0

    def try_acquire(
        self,
        priority: int,
        avoid: Iterable[Upstream] = (),
        route: RequestRoute | None = None,
        tenant: str = "",
    ) -> Upstream | None:
        """A slot now for a request of ``tenant`` in class ``priority``, if one is free to it
        (the headroom above; the slots kept for other active tenants' reservations,
        :mod:`~servetune.gateway.shares`) and no request of its class or a higher one waits
        (they go first — unless the tenant is within its reservation and has none of its own
        waiting: those waiting are then tenants the share rule holds back); or one over an
        upstream's limit (``burst``) for a tenant below its share and its need when none is
        free."""
        queue = self.queue
        shares = self.shares
        on = bool(shares.window_s) and len(shares.seen) > 1
        burst_only = False
        if len(queue) and queue.head_class() <= priority:
            # those waiting go first, unless this tenant has none of its own waiting and is
            # within its reservation (those waiting are then held back by it), or may burst
            # over the limit when no slot is free (a free one is kept for someone else)
            if not (on and queue.head_class() == priority and not queue.waiting(tenant)):
                return None
            now, cap = time.monotonic(), self.capacity()
            svc = self.service_ewma_s
            if not shares.within(tenant, cap, now, svc):
                if not shares.may_burst(tenant, cap, now, svc) or self._free_count(0):
                    return None
                burst_only = True
        elif on and shares.blocked(
            tenant,
            self.capacity() - self.inflight(),
            self.capacity(),
            time.monotonic(),
            self.service_ewma_s,
        ):
            return None
        keep = self._keep(priority)
        u = None if burst_only else self._free(avoid, keep, route)
        if (
            u is None
            and on
            and not keep  # never past the headroom kept for a higher class
            and shares.burst
            and not queue.waiting(tenant)
            and (
                burst_only
                or shares.may_burst(tenant, self.capacity(), time.monotonic(), self.service_ewma_s)
            )
        ):
            # below its share and its need and nothing free: up to ``burst`` over an
            # upstream's limit rather than a wait for another tenant's request to end
            u = self._free(avoid, -shares.burst, route)
        if u is None or not u.breaker.allows():
            return None
        u.inflight += 1
        self.running[priority] += 1
        if shares.window_s:
            shares.took(tenant)
        return u

    async def acquire(
        self,
        tenant: str,
        weight: float,
        priority: int,
        cost: float,
        timeout_s: float,
        max_queued: int,
        max_queued_tenant: int,
        avoid: Iterable[Upstream] = (),
        route: RequestRoute | None = None,
    ) -> Slot:
        """A slot on one upstream, at once or after waiting in fair order; raises
        :class:`QueueRefusal` when the queue is full, the deadline passes or no upstream is
        healthy."""
        if self.shares.window_s:
            self.shares.arrived(tenant, weight, time.monotonic())
        u = self.try_acquire(priority, avoid, route, tenant)
        if u is not None:
            self.queue.charge(tenant, weight, cost)
            return Slot(u, 0.0)
        if not self.healthy():
            wait = min(u.breaker.retry_after_s() for u in self.upstreams)
            raise QueueRefusal(
                "no_upstream",
                max(1.0, wait),
                f"no healthy upstream in group {self.name!r} (circuits open)",
            )
        if len(self.queue) >= max_queued or self.queue.waiting(tenant) >= max_queued_tenant:
            full = "the gateway's queue" if len(self.queue) >= max_queued else "your queue"
            raise QueueRefusal(
                "queue_full",
                self.retry_after_s(),
                f"upstream capacity is in use and {full} is full; retry later",
            )
        loop = asyncio.get_running_loop()
        w = RoutedWaiter(tenant, weight, priority, cost)
        w.route = route
        self.queue.push(w)
        t0 = loop.time()
        handle = loop.call_later(timeout_s, self._expire, w, timeout_s)
        self._arm_wake()
        try:
            up: Upstream = await w.fut
        except asyncio.CancelledError:
            if w.fut.done() and not w.fut.cancelled() and w.fut.exception() is None:
                self.release(w.fut.result(), priority, None, tenant)
            elif self.queue.remove(w) and len(self.queue):
                self.dispatch()  # a higher class may have gone idle: lower ones may go
            raise
        finally:
            handle.cancel()
        return Slot(up, loop.time() - t0)

    def _expire(self, w: Waiter, timeout_s: float) -> None:
        if w.fut.done() or not self.queue.remove(w):
            return
        if len(self.queue):
            self.dispatch()  # a higher class may have gone idle: lower ones may go
        if not self.healthy():
            w.fut.set_exception(
                QueueRefusal(
                    "no_upstream",
                    1.0,
                    f"no healthy upstream in group {self.name!r} within {timeout_s:g} s",
                )
            )
            return
        w.fut.set_exception(
            QueueRefusal(
                "queue_timeout",
                self.retry_after_s(),
                f"no upstream slot freed within the queue deadline ({timeout_s:g} s); "
                "the upstreams are at their admission limit",
            )
        )

    def _arm_wake(self) -> None:
        """With waiters and an open circuit, look again when its cooldown ends."""
        if self._wake is not None or not len(self.queue):
            return
        waits = [u.breaker.retry_after_s() for u in self.upstreams if u.breaker.state == "open"]
        if not waits:
            return
        loop = asyncio.get_running_loop()

        def wake() -> None:
            self._wake = None
            self.dispatch()
            self._arm_wake()

        self._wake = loop.call_later(min(waits) + 0.01, wake)

    def retry_after_s(self) -> float:
        """A guess of when a slot frees for a new request: the queue ahead divided by the
        slots, times the mean time a request holds one (at least 1 s)."""
        slots = self.capacity()
        if not math.isfinite(slots) or slots <= 0:
            return 1.0
        return max(1.0, math.ceil((len(self.queue) + 1) / slots * self.service_ewma_s))

    # -- releasing ---------------------------------------------------------------------------
    def release(
        self, u: Upstream, priority: int, service_s: float | None = None, tenant: str = ""
    ) -> None:
        u.inflight -= 1
        self.running[priority] -= 1
        if self.shares.window_s:
            self.shares.gave(tenant, service_s)
        if service_s is not None:
            self.service_ewma_s += 0.05 * (service_s - self.service_ewma_s)
        if len(self.queue):
            self.dispatch()

    def dispatch(self) -> None:
        """Hand free slots to waiters, in fair order (a class held back by the headroom holds
        back the classes below it too: strict priority)."""
        queue = self.queue
        while len(queue):
            keep = self._keep(queue.head_class())
            if self._free_count(keep) == 0:
                self._arm_wake()
                return
            shares = self.shares
            if shares.window_s and len(shares.seen) > 1:
                # the tenants at their share wait while the free slots are those kept for
                # active tenants below theirs (a free slot stays free for them)
                free, cap, now = (
                    self.capacity() - self.inflight(),
                    self.capacity(),
                    time.monotonic(),
                )
                w = queue.pop(partial(_held_back, shares, free, cap, now, self.service_ewma_s))
            else:
                w = queue.pop()
            if w is None:
                return
            if w.fut.done():
                continue
            route = getattr(w, "route", None)
            tried: list[Upstream] = []
            while True:
                u = self._free(tried, keep, route)
                if u is None or u in tried:
                    # every free one's half-open probe was taken meanwhile (rare): it waits
                    # again, behind its tenant's others
                    queue.push(w)
                    self._arm_wake()
                    return
                if u.breaker.allows():
                    break
                tried.append(u)
            u.inflight += 1
            self.running[w.priority] += 1
            if shares.window_s:
                shares.took(w.tenant)
            w.fut.set_result(u)

    def _free_count(self, keep: int) -> int:
        """Upstreams with more than ``keep`` free slots whose circuit lets a request through."""
        return sum(
            1
            for u in self.upstreams
            if (u.limit is None or u.inflight + keep < u.limit) and u.breaker.would_allow()
        )


def _held_back(
    shares: TenantShares,
    free: float,
    cap: float,
    now: float,
    service_s: float,
    tenant: str,
) -> bool:
    return shares.blocked(tenant, free, cap, now, service_s)


class RoutedWaiter(Waiter):
    """A waiting request with what its group's routing policy reads."""

    __slots__ = ("route",)

    def __init__(self, tenant: str, weight: float, priority: int, cost: float) -> None:
        super().__init__(tenant, weight, priority, cost)
        self.route: RequestRoute | None = None


class Router:
    """Requests over groups by weight: smooth weighted round robin (nginx's), so that a
    5 % candidate gets exactly 1 request in 20, evenly spread."""

    def __init__(self, weights: dict[str, float]) -> None:
        self.weights: dict[str, float] = {}
        self._current: dict[str, float] = {}
        self.set(weights)

    def set(self, weights: dict[str, float]) -> None:
        self.weights = {k: float(v) for k, v in weights.items()}
        self._current = {k: 0.0 for k in self.weights}

    def pick(self, healthy: dict[str, bool] | None = None) -> str:
        total = 0.0
        best = None
        cur = self._current
        for name, w in self.weights.items():
            if w <= 0 or (healthy is not None and not healthy.get(name, True)):
                continue
            cur[name] += w
            total += w
            if best is None or cur[name] > cur[best]:
                best = name
        if best is None:  # every weighted group unhealthy: fall back to the heaviest
            return max(self.weights, key=self.weights.__getitem__)
        cur[best] -= total
        return best
