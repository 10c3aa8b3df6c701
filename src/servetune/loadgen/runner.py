"""Runs a plan over one or more event loops (worker processes) sharing one start clock.

The parent owns the progress line, Ctrl-C and (via the caller) the metrics scraper; each
worker owns a driver, an HTTP session and its share of the plan, and appends its records
to the same ``requests.jsonl``. ``time.perf_counter_ns`` is CLOCK_MONOTONIC on Linux, one
clock for every process of the machine, so a t0 chosen by the parent holds in the workers.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import multiprocessing as mp
import signal
import time
from collections.abc import Awaitable, Callable, Sequence
from multiprocessing.connection import Connection
from multiprocessing.context import SpawnProcess
from pathlib import Path
from typing import cast

from pydantic import BaseModel

from servetune.client.http import OpenAIClient
from servetune.client.transports import TransportName, make_transport
from servetune.loadgen.driver import Driver, PlannedRequest
from servetune.loadgen.live import Snapshot
from servetune.loadgen.progress import ProgressLine
from servetune.loadgen.session_driver import PlannedSession, SessionDriver, SessionStyle
from servetune.loadgen.sink import RecordSink
from servetune.results.schema import Endpoint
from servetune.workload.tokens import HFTokenizer

_REPORT_S = 0.25
_START_MARGIN_NS = 30_000_000
_WORKER_READY_TIMEOUT_S = 60.0


class LoopSetup(BaseModel):
    """What one load-generating loop needs besides its requests (picklable)."""

    base_url: str
    endpoint: Endpoint
    api_key: str | None
    timeout_s: float
    http_client: TransportName = "fast"
    requests_path: Path
    max_concurrency: int | None
    stop_after_ns: int | None
    drain_timeout_s: float | None
    tokenizer: str | None = None
    """The local tokenizer (``--tokenizer``) that counts a response's text when the server
    sends no usage; without one such a response counts its content chunks."""
    sessions: SessionStyle | None = None
    """Set when the items are sessions (:mod:`servetune.loadgen.session_driver`)."""


LoadItem = PlannedRequest | PlannedSession
"""What a loop is given: requests, or (with ``LoopSetup.sessions``) sessions."""


class LoadOutcome(BaseModel):
    t0_ns: int
    interrupted: bool
    snapshots: list[Snapshot]
    cpu_s: float
    """CPU seconds the client used during the load (every process)."""


async def _drive(
    index: int,
    setup: LoopSetup,
    items: Sequence[LoadItem],
    t0_ns: int,
    stop: asyncio.Event,
    report: Callable[[Snapshot], None] | None,
    counter: HFTokenizer | None = None,
) -> tuple[bool, Snapshot]:
    """Run one driver until its plan is done or ``stop`` is set; returns (interrupted, final).
    ``counter``: :func:`load_counter`'s, loaded before t0 (loading takes a while)."""
    cpu0 = time.process_time()
    transport = make_transport(setup.http_client, setup.base_url, setup.api_key)
    sink = RecordSink(setup.requests_path)
    sink.start()
    client = OpenAIClient(
        transport, setup.endpoint, t0_ns, setup.timeout_s, tokenizer=counter, worker=index
    )
    driver: Driver
    if setup.sessions is not None:
        driver = SessionDriver(
            client,
            cast(Sequence[PlannedSession], items),
            sink,
            t0_ns,
            setup.sessions,
            setup.max_concurrency,
            setup.stop_after_ns,
        )
    else:
        driver = Driver(
            client,
            cast(Sequence[PlannedRequest], items),
            sink,
            t0_ns,
            setup.max_concurrency,
            setup.stop_after_ns,
        )

    async def reporter() -> None:
        ticks = 0
        while True:
            await asyncio.sleep(_REPORT_S)
            ticks += 1
            # Young objects every tick; the middle generation (cycles that lived a while,
            # e.g. a failed request's traceback) every 10 s, so a long run stays bounded.
            gc.collect(1 if ticks % 40 == 0 else 0)
            if report is not None:
                report(driver.stats.snapshot(index))

    rep = asyncio.get_running_loop().create_task(reporter())
    stopper = asyncio.get_running_loop().create_task(stop.wait())
    interrupted = False
    try:
        work = asyncio.get_running_loop().create_task(driver.dispatch())
        await asyncio.wait({work, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if stop.is_set():
            interrupted = True
            work.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await work
            await driver.cancel_all()
        else:
            drain = asyncio.get_running_loop().create_task(driver.drain(setup.drain_timeout_s))
            await asyncio.wait({drain, stopper}, return_when=asyncio.FIRST_COMPLETED)
            if not drain.done():
                interrupted = True
                drain.cancel()
                await driver.cancel_all()
    finally:
        rep.cancel()
        stopper.cancel()
        await sink.close()
        await transport.close()
    gc.unfreeze()
    gc.enable()
    final = driver.stats.snapshot(index)
    final.cpu_s = time.process_time() - cpu0
    final.kernel_stamped_reads, final.user_stamped_reads = transport.stamp_counts()
    return interrupted, final


def load_counter(setup: LoopSetup) -> HFTokenizer | None:
    """The local tokenizer that counts a response without usage, loaded before the start
    clock is set: loading a large vocabulary takes long enough to make the first sends late."""
    return HFTokenizer(setup.tokenizer) if setup.tokenizer else None


def _freeze_heap() -> None:
    """Take everything built so far (the plan, request bodies, imports), which lives for the
    whole run, out of the collector's view: no full collection then stalls the loop mid-run
    (tens of ms with a big plan — a TTFT outlier made by the client, not the server). Done
    before t0 is chosen, since the collection itself takes that long."""
    gc.collect()
    gc.freeze()
    # The hot path's garbage is acyclic and freed by reference counting; automatic collection
    # would now and then walk every stream in flight (1–3 ms stalls). The reporter collects the
    # young generations between ticks instead; gc is re-enabled when the load ends.
    gc.disable()


# --- worker processes -------------------------------------------------------------------


def _worker_main(index: int, setup: LoopSetup, items: Sequence[LoadItem], conn: Connection) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    from servetune.aio import run

    run(_worker_async(index, setup, items, conn))


async def _worker_async(
    index: int, setup: LoopSetup, items: Sequence[LoadItem], conn: Connection
) -> None:
    loop = asyncio.get_running_loop()
    counter = load_counter(setup)
    _freeze_heap()
    conn.send(("ready", index))
    msg = await loop.run_in_executor(None, conn.recv)
    if msg[0] != "start":
        return
    t0_ns = int(msg[1])
    stop = asyncio.Event()

    def on_message() -> None:
        try:
            m = conn.recv()
        except EOFError:
            m = ("stop",)
        if m[0] == "stop":
            stop.set()
            loop.remove_reader(conn.fileno())

    loop.add_reader(conn.fileno(), on_message)
    interrupted, final = await _drive(
        index, setup, items, t0_ns, stop, lambda s: conn.send(("stats", s)), counter
    )
    with contextlib.suppress(Exception):
        loop.remove_reader(conn.fileno())
    conn.send(("done", final, interrupted))


# --- the parent -------------------------------------------------------------------------


def split_items(items: Sequence[LoadItem], workers: int) -> list[list[LoadItem]]:
    """Round-robin, so every worker's share keeps the plan's shape and rate."""
    return [list(items[i::workers]) for i in range(workers)]


def split_concurrency(total: int | None, workers: int) -> list[int | None]:
    if total is None:
        return [None] * workers
    return [total // workers + (1 if i < total % workers else 0) for i in range(workers)]


async def run_load(
    items: Sequence[LoadItem],
    setup: LoopSetup,
    workers: int,
    progress: ProgressLine,
    on_start: Callable[[int], Awaitable[None]] | None = None,
) -> LoadOutcome:
    """Run the plan; Ctrl-C (SIGINT) stops it cleanly. ``on_start(t0_ns)`` runs at t0."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGINT, stop.set)
        loop.add_signal_handler(signal.SIGTERM, stop.set)
    try:
        if workers <= 1:
            return await _run_inline(items, setup, progress, stop, on_start)
        return await _run_processes(items, setup, workers, progress, stop, on_start)
    finally:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(signal.SIGINT)
            loop.remove_signal_handler(signal.SIGTERM)


async def _run_inline(
    items: Sequence[LoadItem],
    setup: LoopSetup,
    progress: ProgressLine,
    stop: asyncio.Event,
    on_start: Callable[[int], Awaitable[None]] | None,
) -> LoadOutcome:
    counter = load_counter(setup)
    _freeze_heap()
    t0 = time.perf_counter_ns() + _START_MARGIN_NS // 3
    if on_start is not None:
        await on_start(t0)
    last: dict[int, Snapshot] = {}

    def report(s: Snapshot) -> None:
        last[0] = s
        progress.update([s])

    cpu0 = time.process_time()
    with progress:
        interrupted, final = await _drive(0, setup, items, t0, stop, report, counter)
        progress.update([final], final=True)
    cpu = time.process_time() - cpu0
    return LoadOutcome(t0_ns=t0, interrupted=interrupted, snapshots=[final], cpu_s=cpu)


async def _run_processes(
    items: Sequence[LoadItem],
    setup: LoopSetup,
    workers: int,
    progress: ProgressLine,
    stop: asyncio.Event,
    on_start: Callable[[int], Awaitable[None]] | None,
) -> LoadOutcome:
    loop = asyncio.get_running_loop()
    ctx = mp.get_context("spawn")
    shares = split_items(items, workers)
    concs = split_concurrency(setup.max_concurrency, workers)
    procs: list[SpawnProcess] = []
    conns: list[Connection] = []
    for i in range(workers):
        parent, child = ctx.Pipe()
        s = setup.model_copy(update={"max_concurrency": concs[i]})
        p = ctx.Process(target=_worker_main, args=(i, s, shares[i], child), daemon=True)
        p.start()
        child.close()
        procs.append(p)
        conns.append(parent)
    try:
        for c in conns:
            ok = await loop.run_in_executor(None, c.poll, _WORKER_READY_TIMEOUT_S)
            if not ok:
                raise RuntimeError("a load-generating worker did not start within 60 s")
            c.recv()
        t0 = time.perf_counter_ns() + _START_MARGIN_NS
        cpu0 = time.process_time()
        for c in conns:
            c.send(("start", t0))
        if on_start is not None:
            await on_start(t0)
        snaps: dict[int, Snapshot] = {}
        finished: dict[int, bool] = {}
        all_done = asyncio.Event()

        def reader(i: int) -> None:
            try:
                msg = conns[i].recv()
            except (EOFError, OSError):
                loop.remove_reader(conns[i].fileno())
                finished.setdefault(i, True)
                if len(finished) == workers:
                    all_done.set()
                return
            if msg[0] == "stats":
                snaps[i] = msg[1]
            elif msg[0] == "done":
                snaps[i] = msg[1]
                finished[i] = bool(msg[2])
                loop.remove_reader(conns[i].fileno())
                if len(finished) == workers:
                    all_done.set()

        for i, c in enumerate(conns):
            loop.add_reader(c.fileno(), reader, i)
        stop_sent = False
        with progress:
            while not all_done.is_set():
                waiter = loop.create_task(all_done.wait())
                stopper = loop.create_task(stop.wait())
                await asyncio.wait(
                    {waiter, stopper}, timeout=_REPORT_S, return_when=asyncio.FIRST_COMPLETED
                )
                waiter.cancel()
                stopper.cancel()
                if stop.is_set() and not stop_sent:
                    stop_sent = True
                    for c in conns:
                        with contextlib.suppress(OSError):
                            c.send(("stop",))
                progress.update(list(snaps.values()))
            progress.update(list(snaps.values()), final=True)
        final = [snaps[i] for i in sorted(snaps)]
        return LoadOutcome(
            t0_ns=t0,
            interrupted=stop_sent or any(finished.values()),
            snapshots=final,
            cpu_s=time.process_time() - cpu0 + sum(s.cpu_s for s in final),
        )
    finally:
        for p in procs:
            await loop.run_in_executor(None, p.join, 10)
            if p.is_alive():
                p.kill()
        for c in conns:
            c.close()
