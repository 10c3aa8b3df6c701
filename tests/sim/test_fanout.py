"""The two-thread step writer: every byte arrives once, in order, never before the step's end."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from servetune.sim.fanout import CHUNK, Fanout


@pytest.fixture
def fan() -> Iterator[Fanout]:
    f = Fanout.create(realtime=False)
    if f is None:
        pytest.skip("Linux AIO is not available here")
    yield f
    f.close()


def _pairs(n: int) -> list[tuple[socket.socket, socket.socket]]:
    out = []
    for _ in range(n):
        a, b = socket.socketpair()
        a.setblocking(False)
        b.setblocking(False)
        out.append((a, b))
    return out


def test_writes_both_halves_at_the_target_and_reports_full_sockets(fan: Fanout) -> None:
    pairs = _pairs(3 * CHUNK)
    full = pairs[5][0]
    with pytest.raises(BlockingIOError):
        while True:
            full.send(b"z" * 65536)
    jobs = [(a.fileno(), b"token %d\n" % i) for i, (a, _) in enumerate(pairs)]
    target = time.perf_counter() + 0.02
    fan.arm(jobs, target)
    time.sleep(max(0.0, target - time.perf_counter()))
    times, failed = fan.finish()
    assert fan.split
    assert len(times) == len(jobs)
    assert min(times) >= target
    assert failed == [(5, 0)]
    for i, (_, b) in enumerate(pairs):
        if i != 5:
            assert b.recv(100) == b"token %d\n" % i
    for a, b in pairs:
        a.close()
        b.close()


def test_a_small_step_stays_on_the_calling_thread(fan: Fanout) -> None:
    pairs = _pairs(3)
    fan.arm([(a.fileno(), b"x") for a, _ in pairs], time.perf_counter())
    times, failed = fan.finish()
    assert not fan.split
    assert len(times) == 3
    assert failed == []
    assert [b.recv(10) for _, b in pairs] == [b"x"] * 3
    for a, b in pairs:
        a.close()
        b.close()
