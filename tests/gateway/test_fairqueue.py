"""Fair queueing by tokens across tenants, priority classes, deadlines, and the slot pool."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from servetune.gateway.breaker import Breaker
from servetune.gateway.fairqueue import FairQueue, Waiter
from servetune.gateway.pool import Pool, QueueRefusal, Router, Slot, Upstream


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def test_heavy_tenant_gets_its_token_share_not_its_request_share() -> None:
    async def main() -> list[str]:
        q = FairQueue(1)
        for _ in range(20):
            q.push(Waiter("heavy", 1.0, 0, 1000.0))
        for _ in range(20):
            q.push(Waiter("light", 1.0, 0, 100.0))
        order = []
        while (w := q.pop()) is not None:
            order.append(w.tenant)
        return order

    order = run(main())
    # by tokens: ten light requests per heavy one while both wait
    first = order[:22]
    assert first.count("light") >= 18, first
    assert order.count("heavy") == 20 and order.count("light") == 20


def test_weights_split_tokens() -> None:
    async def main() -> dict[str, int]:
        q = FairQueue(1)
        for _ in range(300):
            q.push(Waiter("a", 3.0, 0, 10.0))
            q.push(Waiter("b", 1.0, 0, 10.0))
        served = {"a": 0, "b": 0}
        for _ in range(200):
            w = q.pop()
            assert w is not None
            served[w.tenant] += 1
        return served

    served = run(main())
    assert served["a"] == pytest.approx(150, abs=2) and served["b"] == pytest.approx(50, abs=2)


def test_priority_class_goes_first_and_idle_credit_is_not_banked() -> None:
    async def main() -> list[str]:
        q = FairQueue(3)
        q.charge("busy", 1.0, 10_000.0)  # served a lot while 'late' was idle
        q.push(Waiter("busy", 1.0, 1, 10.0))
        q.push(Waiter("busy", 1.0, 1, 10.0))
        q.push(Waiter("late", 1.0, 1, 10.0))  # lifted to the busy tenant's counter
        q.push(Waiter("batch", 1.0, 2, 1.0))
        q.push(Waiter("vip", 1.0, 0, 1e9))
        return [w.tenant for w in iter(q.pop, None)]

    order = run(main())
    assert order[0] == "vip" and order[-1] == "batch"
    # 'late' does not jump ahead of 'busy' by its idle time: they alternate
    assert order[1:4] in (["busy", "late", "busy"], ["late", "busy", "busy"])


def test_remove_and_counts() -> None:
    async def main() -> None:
        q = FairQueue(1)
        a, b = Waiter("t", 1.0, 0, 1.0), Waiter("t", 1.0, 0, 1.0)
        q.push(a)
        q.push(b)
        assert len(q) == 2 and q.waiting("t") == 2
        assert q.remove(a) and not q.remove(a)
        assert len(q) == 1 and q.pop() is b and q.pop() is None and q.waiting("t") == 0

    run(main())


def _pool(limit: int, n: int = 1) -> Pool:
    ups = [Upstream(f"http://127.0.0.1:{9000 + i}/v1", "g", limit, Breaker()) for i in range(n)]
    return Pool("g", ups, 3)


def test_pool_queues_then_hands_slots_in_fair_order() -> None:
    async def main() -> list[str]:
        pool = _pool(1)
        first = await pool.acquire("heavy", 1.0, 1, 100.0, 5.0, 100, 100)
        got: list[str] = []

        async def one(tenant: str, cost: float) -> None:
            slot = await pool.acquire(tenant, 1.0, 1, cost, 5.0, 100, 100)
            got.append(tenant)
            await asyncio.sleep(0)
            pool.release(slot.upstream, 1)

        tasks = [asyncio.create_task(one("heavy", 1000.0)) for _ in range(3)]
        await asyncio.sleep(0)
        tasks += [asyncio.create_task(one("light", 10.0)) for _ in range(3)]
        await asyncio.sleep(0)
        assert len(pool.queue) == 6
        pool.release(first.upstream, 1)
        await asyncio.gather(*tasks)
        return got

    got = run(main())
    assert got[0] == "heavy" or got[:3] == ["light"] * 3
    assert got.index("light") < 2 and got[-1] == "heavy"


def test_pool_deadline_and_bounds_give_refusals() -> None:
    async def main() -> None:
        pool = _pool(1)
        await pool.acquire("a", 1.0, 1, 1.0, 5.0, 100, 100)
        with pytest.raises(QueueRefusal) as exc:
            await pool.acquire("a", 1.0, 1, 1.0, 0.05, 100, 100)
        assert exc.value.reason == "queue_timeout" and exc.value.retry_after_s >= 1
        assert len(pool.queue) == 0
        with pytest.raises(QueueRefusal) as exc:
            await pool.acquire("a", 1.0, 1, 1.0, 5.0, 0, 100)
        assert exc.value.reason == "queue_full"

    run(main())


def test_cancelled_waiter_leaves_the_queue_and_an_assigned_slot_is_returned() -> None:
    async def main() -> None:
        pool = _pool(1)
        held = await pool.acquire("a", 1.0, 1, 1.0, 5.0, 100, 100)
        t = asyncio.create_task(pool.acquire("b", 1.0, 1, 1.0, 5.0, 100, 100))
        await asyncio.sleep(0)
        assert len(pool.queue) == 1
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
        assert len(pool.queue) == 0
        # a slot handed over in the same turn as the cancel goes back to the pool
        t2 = asyncio.create_task(pool.acquire("c", 1.0, 1, 1.0, 5.0, 100, 100))
        await asyncio.sleep(0)
        pool.release(held.upstream, 1)  # hands the slot to c
        t2.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t2
        assert pool.upstreams[0].inflight == 0

    run(main())


def test_pool_avoids_open_circuits_and_prefers_least_loaded() -> None:
    async def main() -> None:
        pool = _pool(2, n=2)
        a, b = pool.upstreams
        s1 = await pool.acquire("t", 1.0, 1, 1.0, 1.0, 10, 10)
        s2 = await pool.acquire("t", 1.0, 1, 1.0, 1.0, 10, 10)
        assert {s1.upstream, s2.upstream} == {a, b}
        for _ in range(5):
            b.breaker.failure()
        assert b.breaker.state == "open"
        pool.release(s2.upstream, 1)
        s3 = await pool.acquire("t", 1.0, 1, 1.0, 1.0, 10, 10)
        assert s3.upstream is a
        for _ in range(5):
            a.breaker.failure()
        with pytest.raises(QueueRefusal) as exc:
            await pool.acquire("t", 1.0, 1, 1.0, 1.0, 10, 10)
        assert exc.value.reason == "no_upstream"

    run(main())


def test_breaker_half_open_lets_one_probe() -> None:
    now = [0.0]
    br = Breaker(failures=2, cooldown_s=10, clock=lambda: now[0])
    br.failure()
    assert br.allows()
    br.failure()
    assert br.state == "open" and not br.allows() and br.retry_after_s() == 10
    now[0] = 10.5
    assert br.allows() and not br.allows()  # one probe
    br.failure()
    assert br.state == "open" and not br.would_allow()
    now[0] = 21
    assert br.allows()
    br.success()
    assert br.state == "closed" and br.allows() and br.allows()


def test_router_exact_shares() -> None:
    r = Router({"baseline": 95, "candidate": 5})
    picks = [r.pick() for _ in range(200)]
    assert picks.count("candidate") == 10
    # never two candidates in a row at 5 %
    assert all(not (a == b == "candidate") for a, b in itertools.pairwise(picks))
    r.set({"baseline": 0, "candidate": 100})
    assert {r.pick() for _ in range(10)} == {"candidate"}
    r.set({"baseline": 50, "candidate": 50})
    assert {r.pick(healthy={"candidate": False}) for _ in range(10)} == {"baseline"}


INTERACTIVE, STANDARD, BATCH = 0, 1, 2


def _acq(pool: Pool, tenant: str, priority: int) -> asyncio.Task[Slot]:
    return asyncio.create_task(pool.acquire(tenant, 1.0, priority, 1.0, 5.0, 100, 100))


def test_headroom_keeps_the_last_slot_for_an_active_interactive_class() -> None:
    async def main() -> None:
        pool = Pool("g", [Upstream("http://127.0.0.1:9000/v1", "g", 4, Breaker())], 3, 1)
        u = pool.upstreams[0]
        i1 = await pool.acquire("chat", 1.0, INTERACTIVE, 1.0, 5.0, 100, 100)
        for _ in range(2):  # slots 2 and 3: more than the headroom is free
            s = await pool.acquire("bulk", 1.0, STANDARD, 1.0, 5.0, 100, 100)
            assert s.queued_s == 0.0
        s3 = _acq(pool, "bulk", STANDARD)
        await asyncio.sleep(0.01)
        # the last free slot is kept while an interactive request runs: bulk waits
        assert not s3.done() and len(pool.queue) == 1 and u.inflight == 3
        # an interactive request takes it at once, past the waiting standard one
        i2 = await pool.acquire("chat", 1.0, INTERACTIVE, 1.0, 5.0, 100, 100)
        assert i2.queued_s == 0.0 and u.inflight == 4
        pool.release(i1.upstream, INTERACTIVE)
        await asyncio.sleep(0.01)
        assert not s3.done(), "one interactive request still runs: the freed slot is kept"
        pool.release(i2.upstream, INTERACTIVE)
        await asyncio.wait_for(s3, 5.0)  # no interactive request left: bulk may take it
        assert u.inflight == 3 and pool.running == [0, 3, 0]
        # with no interactive request active, a standard one takes the very last slot
        s4 = await pool.acquire("bulk", 1.0, STANDARD, 1.0, 5.0, 100, 100)
        assert s4.queued_s == 0.0 and u.inflight == 4 and len(pool.queue) == 0

    run(main())


def test_headroom_two_and_its_timeout_is_a_queue_refusal() -> None:
    async def main() -> None:
        pool = Pool("g", [Upstream("http://127.0.0.1:9000/v1", "g", 4, Breaker())], 3, 2)
        i1 = await pool.acquire("chat", 1.0, INTERACTIVE, 1.0, 5.0, 100, 100)
        await pool.acquire("bulk", 1.0, STANDARD, 1.0, 5.0, 100, 100)  # 3 free -> 2 left
        with pytest.raises(QueueRefusal) as exc:  # 2 free = the headroom: it waits, then 429
            await pool.acquire("bulk", 1.0, STANDARD, 1.0, 0.05, 100, 100)
        assert exc.value.reason == "queue_timeout" and len(pool.queue) == 0
        pool.release(i1.upstream, INTERACTIVE)
        s = await pool.acquire("bulk", 1.0, STANDARD, 1.0, 0.05, 100, 100)
        assert s.queued_s == 0.0 and pool.running == [0, 2, 0]

    run(main())


def test_headroom_protects_every_higher_class_and_zero_turns_it_off() -> None:
    async def main() -> None:
        pool = Pool("g", [Upstream("http://127.0.0.1:9000/v1", "g", 2, Breaker())], 3, 1)
        s1 = await pool.acquire("std", 1.0, STANDARD, 1.0, 5.0, 100, 100)
        b = _acq(pool, "batch", BATCH)
        await asyncio.sleep(0.01)
        assert not b.done()  # a standard request runs: batch may not take the last slot
        pool.release(s1.upstream, STANDARD)
        await asyncio.wait_for(b, 5.0)
        # headroom 0: the last slot goes to whoever asks (the behaviour without it)
        off = Pool("g", [Upstream("http://127.0.0.1:9001/v1", "g", 2, Breaker())], 3, 0)
        await off.acquire("chat", 1.0, INTERACTIVE, 1.0, 5.0, 100, 100)
        s = await off.acquire("bulk", 1.0, STANDARD, 1.0, 5.0, 100, 100)
        assert s.queued_s == 0.0 and off.upstreams[0].inflight == 2

    run(main())


def test_a_waiting_higher_class_goes_before_a_headroom_held_lower_one() -> None:
    async def main() -> None:
        # two upstreams of 1 slot each, headroom 1: while a standard request is active, batch
        # may take no slot at all; a standard *waiter* counts as active too
        ups = [Upstream(f"http://127.0.0.1:{9000 + i}/v1", "g", 1, Breaker()) for i in range(2)]
        pool = Pool("g", ups, 3, 1)
        s1 = await pool.acquire("std", 1.0, STANDARD, 1.0, 5.0, 100, 100)
        b = _acq(pool, "batch", BATCH)
        await asyncio.sleep(0.01)
        assert not b.done()
        s2 = await pool.acquire("std", 1.0, STANDARD, 1.0, 5.0, 100, 100)  # the free slot
        waiting_std = _acq(pool, "std", STANDARD)
        await asyncio.sleep(0.01)
        assert len(pool.queue) == 2
        pool.release(s1.upstream, STANDARD)  # goes to the standard waiter, not to batch
        got = await asyncio.wait_for(waiting_std, 5.0)
        assert not b.done()
        for slot in (s2, got):
            pool.release(slot.upstream, STANDARD)
        await asyncio.wait_for(b, 5.0)
        assert pool.running == [0, 0, 1]

    run(main())


def _share_pool(window_s: float) -> Pool:
    return Pool(
        "g",
        [Upstream("http://127.0.0.1:9000/v1", "g", 4, Breaker())],
        3,
        0,
        share_window_s=window_s,
    )


def test_fair_share_keeps_a_slot_for_an_active_tenant_below_its_share() -> None:
    """A flood at equal priority and without a cap of its own holds every slot (it is alone:
    nothing is held back); once a light tenant is active, each slot the flood frees goes to
    the light tenant's waiting request, then stays free for its next one — the flood's own
    waiters do not get it. Before (no share rule) the flood's waiters took every freed slot
    and light's second request waited."""

    async def main(window_s: float) -> tuple[bool, int, bool]:
        pool = _share_pool(window_s)
        u = pool.upstreams[0]
        flood = [await pool.acquire("flood", 1.0, STANDARD, 1.0, 5.0, 100, 100) for _ in range(4)]
        waiting = [_acq(pool, "flood", STANDARD) for _ in range(3)]
        await asyncio.sleep(0.01)
        light1 = _acq(pool, "light", STANDARD)
        await asyncio.sleep(0.01)
        pool.release(flood[0].upstream, STANDARD, None, "flood")
        await asyncio.sleep(0.01)
        got_first = light1.done() and not any(w.done() for w in waiting)
        pool.release(flood[1].upstream, STANDARD, None, "flood")
        await asyncio.sleep(0.01)
        inflight = u.inflight  # 3 with the share rule: the freed slot is kept for light
        second = pool.try_acquire(STANDARD, tenant="light")
        for w in waiting:
            w.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)
        return got_first, inflight, second is not None

    assert run(main(10.0)) == (True, 3, True)
    _first, inflight, second = run(main(0.0))  # the rule off: as before
    assert inflight == 4 and not second


def test_fair_share_is_work_conserving() -> None:
    """Alone, a tenant uses every slot; a tenant quiet for the window stops holding any back;
    a tenant below its share takes a slot ahead of those above theirs waiting."""

    async def main() -> None:
        pool = _share_pool(10.0)
        u = pool.upstreams[0]
        for _ in range(4):  # alone: all four
            await pool.acquire("flood", 1.0, STANDARD, 1.0, 5.0, 100, 100)
        assert u.inflight == 4
        pool.shares.arrived("light", 1.0, 0.0)  # light's last request long ago
        pool.release(u, STANDARD, None, "flood")
        s = await asyncio.wait_for(pool.acquire("flood", 1.0, STANDARD, 1.0, 5.0, 100, 100), 5)
        assert s.queued_s == 0.0 and u.inflight == 4 and "light" not in pool.shares.seen

    run(main())
