"""The upstream groups of a configuration, built at startup and again on each reload: their
admission limits, input counters, upstreams, pools and live signals.

A reload must leave running requests alone and change nothing when it is refused, so the
order matters: :func:`check_groups` does what can fail (reading a sweep, loading a
tokenizer) and changes nothing; :func:`rebuild_pools` then cannot fail. The upstreams are
the live objects, shared with in-flight requests: one that stays keeps its breaker, its
in-flight count and its connections (its limit and breaker settings updated); a pool that
stays keeps its waiters, its fairness counters and its running count (in-flight requests
release into the pool they started on); one that goes is dropped from the map while its
in-flight requests keep their reference.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from servetune.gateway.admission import LiveSignals, comfortable_concurrency
from servetune.gateway.breaker import Breaker
from servetune.gateway.config import GatewayConfig
from servetune.gateway.pool import Pool, Upstream
from servetune.gateway.requests import InputCounter

log = logging.getLogger("servetune.gateway")

UpstreamKey = tuple[str, str]
"""(group, url)"""


def check_groups(
    cfg: GatewayConfig,
) -> tuple[dict[str, int | None], dict[str, InputCounter]]:
    """Each group's admission limit per upstream (``max_concurrency``, tightened by its
    ``from_sweep`` knee) and input counter; raises what a sweep or tokenizer raises."""
    counters: dict[str, InputCounter] = {}
    limits: dict[str, int | None] = {}
    for g in cfg.groups:
        limit = g.max_concurrency
        if g.from_sweep:
            swept, source = comfortable_concurrency(g.from_sweep)
            limit = swept if limit is None else min(limit, swept)
            log.info("group %s: admission limit %d per upstream (%s)", g.name, limit, source)
        limits[g.name] = limit
        counters[g.name] = InputCounter(g.tokenizer)
    return limits, counters


def rebuild_pools(
    cfg: GatewayConfig,
    limits: Mapping[str, int | None],
    upstreams: dict[UpstreamKey, Upstream],
    old_pools: Mapping[str, Pool],
) -> dict[str, Pool]:
    """The pools of ``cfg`` on ``upstreams`` (updated in place: new ones added, changed
    settings applied, gone ones removed), taking over ``old_pools``' queues. Never fails."""
    classes = len(cfg.queue.priorities)
    pools: dict[str, Pool] = {}
    for g in cfg.groups:
        limit = limits[g.name]
        ups = []
        for url in g.urls:
            u = upstreams.get((g.name, url))
            if u is None:
                u = Upstream(
                    url, g.name, limit, Breaker(cfg.breaker.failures, cfg.breaker.cooldown_s)
                )
                upstreams[(g.name, url)] = u
            else:
                u.breaker.threshold = cfg.breaker.failures
                u.breaker.cooldown_s = cfg.breaker.cooldown_s
                if u.configured != limit:
                    u.configured = u.adaptive = u.share = limit
                    u.recompute()
            ups.append(u)
        old = old_pools.get(g.name)
        q = cfg.queue
        pool = Pool(
            g.name,
            ups,
            classes,
            q.priority_headroom,
            g.routing,
            q.fair_share_s,
            q.fair_share_ahead,
            q.fair_share_burst,
            q.fair_share_quantile,
        )
        if old is not None:  # keep the waiters and the fairness counters
            pool.queue = old.queue
            pool.service_ewma_s = old.service_ewma_s
            pool.routes = old.routes
            pool.on_rebalance = old.on_rebalance
            if old.routing == g.routing and old.balancer.names == pool.balancer.names:
                pool.balancer = old.balancer  # the prefix indexes stay warm
            # in-flight requests release into the pool they started on: one count for both
            old.running.extend([0] * (classes - len(old.running)))
            pool.running = old.running
            old.shares.window_s, old.shares.cap = q.fair_share_s, q.fair_share_ahead
            old.shares.burst, old.shares.quantile = q.fair_share_burst, q.fair_share_quantile
            pool.shares = old.shares  # the slots each tenant holds, released into either
        pools[g.name] = pool
    live = {(g.name, url) for g in cfg.groups for url in g.urls}
    for gone in [k for k in upstreams if k not in live]:
        del upstreams[gone]  # in-flight requests keep their reference
    return pools


def request_counters(
    cfg: GatewayConfig, counters: Mapping[str, InputCounter]
) -> tuple[InputCounter, list[InputCounter]]:
    """The counter a request's input is counted with, and the others that count it too.

    The count is made before routing picks a group: with the tokenizer of the first group
    that names one (the estimate when none does); groups naming different tokenizers (a
    canary of another model) each count, and the largest count is the request's — the
    reservation and the input cap hold whichever group serves it."""
    exact = {g.tokenizer: counters[g.name] for g in cfg.groups if g.tokenizer}
    default = next(iter(exact.values()), next(iter(counters.values())))
    return default, [c for c in exact.values() if c is not default]


def sync_signals(
    cfg: GatewayConfig,
    upstreams: Mapping[UpstreamKey, Upstream],
    pools: Mapping[str, Pool],
    signals: dict[UpstreamKey, LiveSignals],
    stopping: set[asyncio.Future[None]],
) -> None:
    """One running :class:`LiveSignals` per upstream with a limit to tighten or whose group's
    routing policy reads its queue and KV use (``score``): kept ones
    pointed at the new upstream and pool, new ones started, gone ones stopped (their stops
    kept in ``stopping`` until done)."""
    for g in cfg.groups:
        for url in g.urls:
            key = (g.name, url)
            u = upstreams[key]
            existing = signals.get(key)
            if existing is not None:
                existing.upstream, existing.pool = u, pools[g.name]
                existing.adaptive = g.adaptive
                continue
            if u.configured is None and not pools[g.name].balancer.uses_signals:
                continue  # nothing to tighten, no policy reading its /metrics
            sig = LiveSignals(u, pools[g.name], cfg.metrics_interval_s, g.adaptive)
            sig.start()
            signals[key] = sig
    live = {(g.name, url) for g in cfg.groups for url in g.urls}
    for key in [k for k in signals if k not in live]:
        fut = asyncio.ensure_future(signals.pop(key).stop())
        stopping.add(fut)
        fut.add_done_callback(stopping.discard)
