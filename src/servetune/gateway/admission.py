"""Admission at the knee: each upstream's concurrency limit, from a sweep and from its own
signals.

**From a sweep** (``--from-sweep DIR`` / ``from_sweep:``): the comfortable concurrency of a
servetune sweep (``sweep.json``'s knee: ``concurrency`` by Little's law = throughput × mean
E2E at the knee; else the client's measured mean concurrency there; else, for a concurrency
sweep, the load knob itself), rounded down. A sweep without a found knee is refused with its
verdict: a limit that is not where the curve bends would be a guess.

**Live** (``adaptive: true``, the default when a limit is set): every ``metrics_interval_s``
the upstream's ``/metrics`` is read (servetune's metrics reader and engine maps: vLLM, SGLang,
TGI, llama.cpp names) and the adaptive limit moves, never above the configured one:

- the engine queues requests it cannot run (``waiting`` > 0) or its KV cache is nearly full
  (``kv_cache_usage`` ≥ 0.95): limit ← max(1, min(limit, in-flight) − max(1, waiting)) —
  the gateway holds back what the engine would only queue (or preempt);
- all clear (no waiting, KV < 0.85) for one interval: limit + 1 (additive increase).

A /metrics that cannot be read leaves the limit where it is and is reported once; the
upstream's signals are in the gateway's ``/admin/state``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
from pathlib import Path

from servetune.aio import cancel_requested, stop_task
from servetune.errors import ConfigError, ResultError
from servetune.gateway.pool import Pool, Upstream
from servetune.gateway.upstream import ConnectionPool, fetch
from servetune.metrics.engine_maps import VLLM_CACHE_CONFIG_INFO, EngineMap, detect
from servetune.metrics.extract import extract_values, reducer_for
from servetune.metrics.prom_reducer import Reducer
from servetune.metrics.prometheus import ParsedMetrics, parse_lines
from servetune.results import server_series as ss
from servetune.results.sweep_schema import read_sweep_result

log = logging.getLogger(__name__)

KV_HIGH = 0.95
KV_LOW = 0.85
SLICE_LINES = 100
SIGNALS = (ss.WAITING, ss.RUNNING, ss.KV_CACHE_USAGE)


def comfortable_concurrency(sweep_dir: str | Path) -> tuple[int, str]:
    """(limit, where it came from) from a sweep's knee."""
    try:
        sweep = read_sweep_result(sweep_dir)
    except ResultError as exc:
        raise ConfigError.over_fields("{from_sweep}: " + exc.message, exc.hint) from None
    knee = sweep.knee
    if knee is None or knee.status != "found":
        verdict = knee.verdict if knee is not None else "the sweep has no knee yet"
        raise ConfigError.over_fields(
            f"{{from_sweep}} {sweep_dir}: no comfortable concurrency ({verdict})",
            hint="sweep further (see the sweep's suggested loads) or set max_concurrency",
        )
    for value, what in (
        (knee.concurrency, "throughput × mean E2E at the knee (Little's law)"),
        (knee.concurrency_client, "the client's mean concurrency at the knee"),
        (knee.offered if sweep.config.mode == "concurrency" else None, "the swept concurrency"),
    ):
        if value is not None and math.isfinite(value) and value >= 1:
            return max(1, math.floor(value)), f"{sweep_dir}: {what} = {value:.1f}"
    raise ConfigError.over_fields(
        f"{{from_sweep}} {sweep_dir}: the knee carries no concurrency figure"
    )


def next_limit(limit: int, ceiling: int, inflight: int, waiting: float, kv: float | None) -> int:
    """One step of the adaptive rule (see the module docstring)."""
    if waiting > 0 or (kv is not None and kv >= KV_HIGH):
        cut = max(1, math.ceil(waiting))
        return max(1, min(limit, max(inflight, 1)) - cut)
    if waiting == 0 and (kv is None or kv < KV_LOW) and limit < ceiling:
        return limit + 1
    return limit


class LiveSignals:
    """Reads one upstream's /metrics on an interval and moves its adaptive limit."""

    def __init__(
        self, upstream: Upstream, pool: Pool, interval_s: float, adaptive: bool = True
    ) -> None:
        self.upstream = upstream
        self.pool = pool
        self.interval_s = interval_s
        self.adaptive = adaptive
        self.emap: EngineMap | None = None
        self._reducer: Reducer | None = None
        self.error: str | None = None
        self._task: asyncio.Task[None] | None = None
        self.conns = ConnectionPool(upstream.host, upstream.port)

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name=f"gateway-signals-{self.upstream.url}")

    async def stop(self) -> None:
        if self._task is not None:
            if not await stop_task(self._task):
                log.warning("upstream %s: /metrics task did not stop in 5 s", self.upstream.url)
            self._task = None
        self.conns.close()

    async def _loop(self) -> None:
        while not cancel_requested():
            try:
                await self.read_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # an odd page never stops the gateway
                if cancel_requested():
                    return  # a cancellation that came out as an error: stop
                self._report(f"{type(exc).__name__}: {exc}")
            await asyncio.sleep(self.interval_s)

    def _report(self, message: str) -> None:
        if self.error is None:
            log.warning("upstream %s /metrics: %s (limit left as is)", self.upstream.url, message)
        self.error = message

    async def _fetch(self) -> str | None:
        u = self.upstream
        try:
            status, _h, body = await fetch(
                self.conns,
                "GET",
                f"{u.prefix}/metrics",
                b"Accept: text/plain\r\nAccept-Encoding: identity\r\n",
                timeout_s=max(2.0, self.interval_s * 2),
            )
        except (OSError, ConnectionError, TimeoutError) as exc:
            self._report(f"cannot read it ({exc or type(exc).__name__})")
            return None
        if status != 200:
            self._report(f"HTTP {status}")
            return None
        return body.decode("utf-8", "replace")

    async def read_once(self) -> dict[str, float] | None:
        text = await self._fetch()
        if text is None:
            return None
        lines = text.split("\n")
        view: ParsedMetrics | Reducer
        if self.emap is None or self._reducer is None:
            full = ParsedMetrics()
            for i in range(0, len(lines), SLICE_LINES):
                parse_lines(lines[i : i + SLICE_LINES], full)
                await asyncio.sleep(0)
            found = detect(full.names() - {VLLM_CACHE_CONFIG_INFO})
            if found is None:
                self._report("no vLLM, SGLang, TGI or llama.cpp metric names")
                return None
            self.emap = dataclasses.replace(
                found,
                values={c: found.values[c] for c in SIGNALS if c in found.values},
                histograms={},
            )
            self._reducer = reducer_for(self.emap)
            view = full
        else:
            reducer = self._reducer
            reducer.reset()
            for i in range(0, len(lines), SLICE_LINES):
                reducer.feed(lines[i : i + SLICE_LINES])
                await asyncio.sleep(0)
            view = reducer
        values, _used = extract_values(view, self.emap)
        self.error = None
        self.apply(values)
        return values

    def apply(self, values: dict[str, float]) -> None:
        u = self.upstream
        u.signals = values
        if not self.adaptive or u.configured is None:
            return
        current = u.adaptive if u.adaptive is not None else u.configured
        new = next_limit(
            current,
            u.configured,
            u.inflight,
            values.get(ss.WAITING, 0.0),
            values.get(ss.KV_CACHE_USAGE),
        )
        if new != u.adaptive:
            u.adaptive = new
            u.recompute()
            if len(self.pool.queue):
                self.pool.dispatch()
