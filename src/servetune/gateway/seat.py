"""The **slot** step of a request: its place on one upstream of its group, and what it is
charged in the fair queue.

A request holds at most one slot at a time. Its first is taken at once when an upstream of the
group has one free (the fair queue is then charged the tokens reserved, as a queued request is
charged when it is handed a slot), else waited for in the fair queue — in its tenant's
priority class, weight and limits, 429/503 past the deadline or the bound
(:class:`~servetune.gateway.pool.QueueRefusal`). A retry takes another, avoiding the
upstreams that failed the request. A slot is freed exactly once — with the time it served when
the upstream answered (the pool's service estimate), without when it did not — and at the end
the fair queue is charged the difference between what the request used and what it reserved.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Sequence

from servetune.gateway.exposition import GatewayMetrics
from servetune.gateway.pool import Pool, Slot, Upstream
from servetune.gateway.route_key import RequestRoute
from servetune.gateway.tenants import TenantRuntime


class Seat:
    __slots__ = ("cost", "held", "pool", "route", "t_start", "tenant")

    def __init__(
        self, tenant: TenantRuntime, reserve: int, route: RequestRoute | None = None
    ) -> None:
        self.tenant = tenant
        self.route = route
        """What the group's routing policy reads (session, prompt blocks)."""
        self.cost = float(reserve)
        """The fair queue's cost of the request: the tokens reserved."""
        self.pool: Pool | None = None
        """The routed group's pool (None: not routed yet)."""
        self.held: Upstream | None = None
        """The upstream whose slot is held (None: none, or freed)."""
        self.t_start = 0.0
        """When the first slot was had (what a slot served is measured from)."""

    def take(self, pool: Pool) -> Upstream | None:
        """The first slot in ``pool`` if one is free now (charged to the fair queue)."""
        self.pool = pool
        t = self.tenant
        shares = pool.shares
        if shares.window_s:
            shares.arrived(t.name, t.weight, time.monotonic())
        u = pool.try_acquire(t.priority, route=self.route, tenant=t.name)
        if u is not None:
            pool.queue.charge(t.name, t.weight, self.cost)
            self.held = u
            self.t_start = time.perf_counter()
        return u

    async def wait(self, max_queued: int, metrics: GatewayMetrics) -> Upstream:
        """The first slot from the fair queue (raises QueueRefusal)."""
        slot = await self._acquire(max_queued, ())
        self.held = slot.upstream
        self.t_start = time.perf_counter()
        if slot.queued_s > 0:
            metrics.observe_queue(self.tenant.name, slot.queued_s)
        return slot.upstream

    def retake(self, avoid: Sequence[Upstream]) -> Upstream | None:
        """Another slot for a retry if one is free now (one not in ``avoid`` if possible)."""
        assert self.pool is not None
        u = self.pool.try_acquire(self.tenant.priority, avoid, self.route, self.tenant.name)
        if u is not None:
            self.held = u
        return u

    async def rewait(self, max_queued: int, avoid: Sequence[Upstream]) -> Upstream:
        """Another slot for a retry from the fair queue (raises QueueRefusal)."""
        slot = await self._acquire(max_queued, avoid)
        self.held = slot.upstream
        return slot.upstream

    def _acquire(self, max_queued: int, avoid: Sequence[Upstream]) -> Awaitable[Slot]:
        t, pool = self.tenant, self.pool
        assert pool is not None
        return pool.acquire(
            t.name,
            t.weight,
            t.priority,
            self.cost,
            t.queue_timeout_s,
            max_queued,
            t.max_queued,
            avoid=avoid,
            route=self.route,
        )

    def release(self, served: bool = False) -> None:
        """Free the slot held, if any (``served``: the upstream answered; the time counts)."""
        u, self.held = self.held, None
        if u is not None and self.pool is not None:
            service_s = time.perf_counter() - self.t_start if served else None
            self.pool.release(u, self.tenant.priority, service_s, self.tenant.name)

    def settle(self, used: int) -> None:
        """Charge the fair queue what the request used beyond (or below) its reservation."""
        if self.pool is not None and used != self.cost:
            t = self.tenant
            self.pool.queue.charge(t.name, t.weight, used - self.cost)
