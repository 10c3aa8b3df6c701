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
slot frees (in fair order) or its deadline passes. :class:`Router` spreads requests over the
groups by weight (smooth weighted round robin: exact shares, no randomness), which is how a
canary gets its 5 % of traffic.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from servetune.gateway.breaker import Breaker
from servetune.gateway.fairqueue import FairQueue, Waiter

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

    def __init__(self, name: str, upstreams: list[Upstream], classes: int) -> None:
        self.name = name
        self.upstreams = upstreams
        self.queue = FairQueue(classes)
        self.service_ewma_s = 1.0
        self._wake: asyncio.TimerHandle | None = None

    # -- choosing ----------------------------------------------------------------------------
    def _free(self, avoid: Iterable[Upstream] = ()) -> Upstream | None:
        best: Upstream | None = None
        best_load = math.inf
        avoided = tuple(avoid)
        fallback: Upstream | None = None
        for u in self.upstreams:
            if not u.has_slot() or not u.breaker.would_allow():
                continue
            load = u.inflight / u.limit if u.limit else u.inflight * 1e-9
            if u in avoided:
                if fallback is None:
                    fallback = u
                continue
            if load < best_load:
                best, best_load = u, load
        return best or fallback

    def healthy(self) -> bool:
        return any(u.breaker.would_allow() for u in self.upstreams)

    def capacity(self) -> float:
        return sum(u.limit if u.limit is not None else math.inf for u in self.upstreams)

    def inflight(self) -> int:
        return sum(u.inflight for u in self.upstreams)

    def try_acquire(self, avoid: Iterable[Upstream] = ()) -> Upstream | None:
        """A slot now, if one is free and nobody waits (a waiting request goes first)."""
        if len(self.queue):
            return None
        u = self._free(avoid)
        if u is None or not u.breaker.allows():
            return None
        u.inflight += 1
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
    ) -> Slot:
        """A slot on one upstream, at once or after waiting in fair order; raises
        :class:`QueueRefusal` when the queue is full, the deadline passes or no upstream is
        healthy."""
        u = self.try_acquire(avoid)
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
        w = Waiter(tenant, weight, priority, cost)
        self.queue.push(w)
        t0 = loop.time()
        handle = loop.call_later(timeout_s, self._expire, w, timeout_s)
        self._arm_wake()
        try:
            up: Upstream = await w.fut
        except asyncio.CancelledError:
            if w.fut.done() and not w.fut.cancelled() and w.fut.exception() is None:
                self.release(w.fut.result())
            else:
                self.queue.remove(w)
            raise
        finally:
            handle.cancel()
        return Slot(up, loop.time() - t0)

    def _expire(self, w: Waiter, timeout_s: float) -> None:
        if w.fut.done() or not self.queue.remove(w):
            return
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
    def release(self, u: Upstream, service_s: float | None = None) -> None:
        u.inflight -= 1
        if service_s is not None:
            self.service_ewma_s += 0.05 * (service_s - self.service_ewma_s)
        if len(self.queue):
            self.dispatch()

    def dispatch(self) -> None:
        """Hand free slots to waiters, in fair order."""
        while len(self.queue):
            u = self._free()
            if u is None or not u.breaker.allows():
                self._arm_wake()
                return
            w = self.queue.pop()
            if w is None:
                return
            if w.fut.done():
                continue
            u.inflight += 1
            w.fut.set_result(u)


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
