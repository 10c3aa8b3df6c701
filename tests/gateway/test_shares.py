"""The fair-share rule of a group's slots (gateway/shares.py) on the real pool: reservations
sized to a tenant's measured concurrency and never over its share, a bounded burst over an
upstream's limit for a light tenant whose own requests outrun its share, nothing held back
from a lone tenant or a one-slot group, and a tenant forgotten once quiet."""

from __future__ import annotations

import asyncio
import time

from servetune.gateway.breaker import Breaker
from servetune.gateway.pool import Pool, Slot, Upstream
from servetune.gateway.shares import TenantShares, poisson_quantile

STANDARD = 1


def _pool(slots: int = 4, burst: int = 1) -> Pool:
    return Pool(
        "g",
        [Upstream("http://127.0.0.1:9000/v1", "g", slots, Breaker())],
        3,
        0,
        share_window_s=10.0,
        share_burst=burst,
    )


def _steady(pool: Pool, tenant: str, rate: float, seconds: float = 10.0) -> None:
    """``tenant`` has sent ``rate`` requests a second for ``seconds`` until now."""
    now = time.monotonic()
    n = int(rate * seconds)
    for i in range(n):
        pool.shares.arrived(tenant, 1.0, now - seconds + (i + 1) / rate)


def _acq(pool: Pool, tenant: str) -> asyncio.Task[Slot]:
    return asyncio.create_task(pool.acquire(tenant, 1.0, STANDARD, 1.0, 5.0, 100, 100))


async def _served(pool: Pool, tenant: str, service_s: float) -> None:
    """One request of ``tenant`` that held its slot ``service_s`` (its mean slot time)."""
    s = await pool.acquire(tenant, 1.0, STANDARD, 1.0, 5.0, 100, 100)
    pool.release(s.upstream, STANDARD, service_s, tenant)


def test_poisson_quantile_is_the_headroom_sizing() -> None:
    # the sizing docs/gateway.md gives for the headroom: λS = 0.65 → 3, λS = 2 → 6
    assert poisson_quantile(0.65, 0.99, 100) == 3
    assert poisson_quantile(2.0, 0.99, 100) == 6
    assert poisson_quantile(0.5, 0.99, 100) == 3  # 2 running covers only 98.6 %
    assert poisson_quantile(0.5, 0.99, 2) == 2  # capped
    assert poisson_quantile(0.0, 0.99, 5) == 0
    assert poisson_quantile(5000.0, 0.99, 7) == 7  # e^-mean underflows: still bounded


def test_reservation_follows_the_measured_rate_up_to_the_share() -> None:
    s = TenantShares(10.0)
    now = 1000.0
    for name, rate in (("light", 5.0), ("trickle", 0.5), ("flood", 50.0)):
        for i in range(int(rate * 10)):
            s.arrived(name, 1.0, now - 10 + (i + 1) / rate)
    s.service_s.update(light=0.1, trickle=0.1, flood=0.1)
    # 12 slots, 3 tenants: a share of 4 each
    assert abs(s.mean("light", now, 1.0) - 0.5) < 0.02
    assert s.reservation("light", 12, now, 1.0) == 3  # its 0.99 quantile: 3 of its share 4
    assert s.reservation("trickle", 12, now, 1.0) == 1
    assert s.reservation("flood", 12, now, 1.0) == 4  # its need (11) capped at its share
    s.cap = 2
    assert s.reservation("light", 12, now, 1.0) == 2  # queue.fair_share_ahead caps it
    s.cap = None
    # quiet for longer than the window: forgotten, nothing reserved for it
    later = now + 10.5
    s.arrived("flood", 1.0, later)
    assert s.reservation("light", 12, later, 1.0) == 0 and "light" not in s.seen


def test_a_light_tenant_beyond_its_share_bursts_one_over_rather_than_wait() -> None:
    """Light (5 req/s × 0.1 s: half a slot on average, 3 at its 0.99 quantile) and a flood,
    4 slots, a share of 2 each. The flood may take only what leaves light's reservation free;
    light's third concurrent request goes one over the upstream's limit at once (on main it
    waited for one of the flood's requests to end); its fourth waits; the flood never
    bursts."""

    async def main() -> None:
        pool = _pool()
        u = pool.upstreams[0]
        _steady(pool, "light", 5.0)
        await _served(pool, "light", 0.1)
        flood = [_acq(pool, "flood") for _ in range(6)]
        await asyncio.sleep(0.01)
        assert u.inflight == 2, "two of four kept for light"
        assert sum(t.done() for t in flood) == 2
        light = [pool.try_acquire(STANDARD, tenant="light") for _ in range(3)]
        assert all(x is u for x in light), light
        assert u.inflight == 5  # one over the limit of 4: the burst
        assert pool.try_acquire(STANDARD, tenant="light") is None  # its fourth waits
        assert pool.try_acquire(STANDARD, tenant="flood") is None
        for _ in range(3):
            pool.release(u, STANDARD, 0.1, "light")
        await asyncio.sleep(0.01)
        # light holds nothing: two slots kept for it again, the flood back to two
        assert u.inflight == 2 and sum(t.done() for t in flood) == 2
        for t in flood:
            t.cancel()
        await asyncio.gather(*flood, return_exceptions=True)

    asyncio.run(main())


def test_what_is_kept_follows_the_light_tenants_need() -> None:
    """A tenant sending one request every two seconds needs one slot, not its share: the
    flood runs on three of four."""

    async def main() -> None:
        pool = _pool()
        u = pool.upstreams[0]
        _steady(pool, "light", 0.5)
        await _served(pool, "light", 0.1)
        flood = [_acq(pool, "flood") for _ in range(6)]
        await asyncio.sleep(0.01)
        assert u.inflight == 3
        for t in flood:
            t.cancel()
        await asyncio.gather(*flood, return_exceptions=True)

    asyncio.run(main())


def test_nothing_is_kept_in_a_one_slot_group_nor_for_a_lone_tenant() -> None:
    """A share of half a slot keeps nothing free (it would idle the group); a lone tenant
    takes every slot."""

    async def main() -> None:
        one = _pool(slots=1, burst=0)
        _steady(one, "light", 5.0)
        s = await asyncio.wait_for(one.acquire("flood", 1.0, STANDARD, 1.0, 5.0, 100, 100), 1)
        assert s.queued_s == 0.0 and one.upstreams[0].inflight == 1
        alone = _pool()
        for _ in range(4):
            await asyncio.wait_for(alone.acquire("flood", 1.0, STANDARD, 1.0, 5.0, 100, 100), 1)
        assert alone.upstreams[0].inflight == 4

    asyncio.run(main())
