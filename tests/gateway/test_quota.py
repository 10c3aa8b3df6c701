"""Token buckets reserved before dispatch: exact under concurrency, in memory and in Redis."""

from __future__ import annotations

import asyncio

import pytest
from redis_server import RedisServer

from servetune.gateway.quota import Limits, MemoryQuota, Refusal, Reservation, refill, wait_for
from servetune.gateway.redis_state import RedisState


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_refill_is_continuous_and_capped() -> None:
    assert refill(0.0, 0.0, 30.0, 600) == 300.0
    assert refill(500.0, 0.0, 60.0, 600) == 600.0
    assert refill(-60.0, 0.0, 6.0, 600) == 0.0  # a debt is repaid by the refill
    assert wait_for(0.0, 10.0, 600) == pytest.approx(1.0)


def test_tpm_reservation_then_settlement_gives_back_the_unused_part() -> None:
    clock = Clock()
    q = MemoryQuota(clock)
    lim = Limits(tpm=1000)
    a = q.reserve_now("t", lim, 600)
    assert isinstance(a, Reservation)
    b = q.reserve_now("t", lim, 600)
    assert isinstance(b, Refusal) and b.reason == "tpm"
    assert b.retry_after_s == pytest.approx(200 * 60 / 1000)
    q.settle_now(a, 100)  # used 100 of 600: 500 back
    c = q.reserve_now("t", lim, 600)
    assert isinstance(c, Reservation)
    q.settle_now(c, 600)
    q.settle_now(c, 0)  # settling twice changes nothing
    d = q.reserve_now("t", lim, 600)
    assert isinstance(d, Refusal)


def test_a_request_larger_than_the_quota_is_refused_for_good() -> None:
    q = MemoryQuota(Clock())
    r = q.reserve_now("t", Limits(tpm=100), 101)
    assert isinstance(r, Refusal) and r.reason == "tpm_too_large" and r.retry_after_s is None


def test_all_or_nothing_a_refused_request_takes_nothing() -> None:
    q = MemoryQuota(Clock())
    lim = Limits(max_concurrency=5, rpm=3, tpm=100)
    assert isinstance(q.reserve_now("t", lim, 60), Reservation)
    refused = q.reserve_now("t", lim, 60)  # tpm refuses: the rpm bucket must keep its token
    assert isinstance(refused, Refusal) and refused.reason == "tpm"
    assert isinstance(q.reserve_now("t", lim, 40), Reservation)
    assert isinstance(q.reserve_now("t", lim, 0), Reservation)  # the 3rd request of 3 rpm
    assert q.inflight("t") == 3


def test_concurrency_cap_counts_until_settled() -> None:
    q = MemoryQuota(Clock())
    lim = Limits(max_concurrency=2)
    a, b = q.reserve_now("t", lim, 1), q.reserve_now("t", lim, 1)
    c = q.reserve_now("t", lim, 1)
    assert isinstance(c, Refusal) and c.reason == "concurrency"
    assert isinstance(a, Reservation) and isinstance(b, Reservation)
    q.settle_now(a, None)
    assert isinstance(q.reserve_now("t", lim, 1), Reservation)
    assert isinstance(q.reserve_now("other", lim, 1), Reservation)  # per tenant


def test_rpm_refills_over_time() -> None:
    clock = Clock()
    q = MemoryQuota(clock)
    lim = Limits(rpm=60)
    for _ in range(60):
        assert isinstance(q.reserve_now("t", lim, 0), Reservation)
    r = q.reserve_now("t", lim, 0)
    assert isinstance(r, Refusal) and r.retry_after_s == pytest.approx(1.0)
    clock.t += 1.0
    assert isinstance(q.reserve_now("t", lim, 0), Reservation)


def test_at_limit_answers_without_taking_anything() -> None:
    q = MemoryQuota(Clock())
    lim = Limits(max_concurrency=1, rpm=2)
    assert q.at_limit("t", lim) is None
    assert q.at_limit("t", lim) is None  # asking twice takes nothing either
    a = q.reserve_now("t", lim, 10)
    assert isinstance(a, Reservation)
    r = q.at_limit("t", lim)
    assert isinstance(r, Refusal) and r.reason == "concurrency"
    q.settle_now(a, 10)
    b = q.reserve_now("t", lim, 10)  # the 2nd request of 2 rpm: the asks took none
    assert isinstance(b, Reservation)
    q.settle_now(b, 10)
    r = q.at_limit("t", lim)
    assert isinstance(r, Refusal) and r.reason == "rpm"


# -- Redis: several replicas, one truth ----------------------------------------------------


async def _replicas(url: str, n: int, lease_s: float = 15.0) -> list[RedisState]:
    states = [RedisState(url, prefix="test:", lease_s=lease_s) for _ in range(n)]
    for s in states:
        await s.start()
    return states


def test_redis_rpm_exact_across_three_replicas(redis_server: RedisServer) -> None:
    async def main() -> list[object]:
        states = await _replicas(redis_server.url, 3)
        try:
            lim = Limits(rpm=10)
            calls = [states[i % 3].reserve("team", lim, 0) for i in range(30)]
            return list(await asyncio.gather(*calls))
        finally:
            for s in states:
                await s.close()

    results = asyncio.run(main())
    assert sum(isinstance(r, Reservation) for r in results) == 10
    refused = [r for r in results if isinstance(r, Refusal)]
    assert all(r.reason == "rpm" and r.retry_after_s and r.retry_after_s > 0 for r in refused)


def test_redis_tpm_settlement_and_concurrency(redis_server: RedisServer) -> None:
    async def main() -> None:
        a, b = await _replicas(redis_server.url, 2)
        try:
            lim = Limits(max_concurrency=2, tpm=1000)
            r1 = await a.reserve("t", lim, 500)
            r2 = await b.reserve("t", lim, 500)
            assert isinstance(r1, Reservation) and isinstance(r2, Reservation)
            r3 = await a.reserve("t", lim, 1)
            assert isinstance(r3, Refusal) and r3.reason == "concurrency"
            await a.settle(r1, 100)  # 400 back, slot freed
            r4 = await b.reserve("t", lim, 400)
            assert isinstance(r4, Reservation)
            r5 = await b.reserve("t", Limits(tpm=1000), 50)
            assert isinstance(r5, Refusal) and r5.reason == "tpm"
            big = await a.reserve("t", lim, 5000)
            assert isinstance(big, Refusal) and big.reason == "tpm_too_large"
        finally:
            await a.close()
            await b.close()

    asyncio.run(main())


def test_redis_lease_of_a_dead_replica_expires(redis_server: RedisServer) -> None:
    async def main() -> None:
        (live,) = await _replicas(redis_server.url, 1, lease_s=2.0)
        (dead,) = await _replicas(redis_server.url, 1, lease_s=2.0)
        try:
            lim = Limits(max_concurrency=1)
            held = await dead.reserve("t", lim, 0)
            assert isinstance(held, Reservation)
            assert dead._task is not None
            dead._task.cancel()  # the replica dies: no more renewals
            blocked = await live.reserve("t", lim, 0)
            assert isinstance(blocked, Refusal)
            await asyncio.sleep(1.5)  # renewed leases of a live replica would survive this
            deadline = asyncio.get_running_loop().time() + 10
            while True:
                got = await live.reserve("t", lim, 0)
                if isinstance(got, Reservation):
                    break
                assert asyncio.get_running_loop().time() < deadline, "the lease never expired"
                await asyncio.sleep(0.2)
        finally:
            await live.close()
            await dead.close()

    asyncio.run(main())


def test_redis_live_leases_are_renewed(redis_server: RedisServer) -> None:
    async def main() -> None:
        a, b = await _replicas(redis_server.url, 2, lease_s=2.0)
        try:
            lim = Limits(max_concurrency=1)
            held = await a.reserve("t", lim, 0)
            assert isinstance(held, Reservation)
            await asyncio.sleep(3.5)  # longer than the lease: renewals keep it
            again = await b.reserve("t", lim, 0)
            assert isinstance(again, Refusal) and again.reason == "concurrency"
            assert await a.live_replicas() == 2
        finally:
            await a.close()
            await b.close()

    asyncio.run(main())


def test_redis_down_fails_closed() -> None:
    async def main() -> None:
        s = RedisState("redis://127.0.0.1:1/0", prefix="x:")
        r = await s.reserve("t", Limits(rpm=5), 0)
        assert isinstance(r, Refusal) and r.reason == "state_unavailable"
        await s.close()

    asyncio.run(main())
