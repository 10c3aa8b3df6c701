"""The gateway: an OpenAI-compatible front on servetune's HTTP layer.

A generation request (``/v1/chat/completions``, ``/v1/completions``, ``/v1/embeddings``) goes
through, in order — each step refuses with an OpenAI-shaped error and nothing forwarded
(:mod:`~servetune.gateway.refusals`):

1. **auth** — ``Authorization: Bearer KEY`` (or ``x-api-key``) → tenant (401 otherwise;
   :mod:`~servetune.gateway.tenants`);
2. **body** — a JSON object with ``model`` and well-typed fields (400 otherwise;
   :mod:`~servetune.gateway.checks`);
3. **caps** — input tokens over ``max_input_tokens`` → 400; ``max_tokens`` over the cap →
   clamped (or 400 with ``max_tokens_policy: refuse``), and set to the cap when absent
   (:mod:`~servetune.gateway.checks`);
4. **quota** — concurrency, rpm and tpm reserved at once (``input + max_tokens × n × prompts``), 429
   with ``Retry-After`` when a bucket is short (:mod:`~servetune.gateway.quota`; here);
5. **route** — a group by weight (canary), then a slot on one of its upstreams, waiting in
   the fair queue when all are at their admission limit (429 past the deadline or bound;
   :mod:`~servetune.gateway.flight`);
6. **forward** — streamed through as it arrives; retried on another upstream only before the
   first byte (connect error, reset, timeout before the head, 500/502/503/504;
   :mod:`~servetune.gateway.flight`, :mod:`~servetune.gateway.failover`).
7. **settle** — the reservation to the engine's ``usage``; the slot freed; metrics and the
   canary's observation recorded (:mod:`~servetune.gateway.settle`).

Steps 1–4 run in :meth:`Gateway._generate`, in the HTTP server's callback; steps 5–7 are a
:class:`~servetune.gateway.flight.Flight`.

``/v1/models`` is passed through (auth only); ``/health``, ``/metrics`` (Prometheus) and the
admin API (:mod:`servetune.gateway.admin_api`; admin key) are the gateway's own. A rollout is
driven by :mod:`servetune.gateway.rollout.control`; a request only reads its step and hands it
an observation. SIGHUP reloads the configuration without dropping streams: in-flight requests
finish on the objects they started with (what a configuration builds, and in which order so
that a refused reload changes nothing: :mod:`~servetune.gateway.tenants`,
:mod:`~servetune.gateway.groups`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import signal
from collections.abc import Awaitable, Callable

from servetune.aio import cancel_requested, stop_task
from servetune.errors import ConfigError, ServetuneError
from servetune.gateway import quota as q
from servetune.gateway.admin_api import AdminAPI
from servetune.gateway.admission import LiveSignals
from servetune.gateway.audit import AuditLog, config_hash
from servetune.gateway.canary import Observation
from servetune.gateway.checks import Prepared, prepare
from servetune.gateway.config import GatewayConfig, host_port, load_config
from servetune.gateway.deadlines import HeadDeadlines
from servetune.gateway.exposition import GatewayMetrics, labels
from servetune.gateway.flight import Flight
from servetune.gateway.groups import (
    UpstreamKey,
    check_groups,
    rebuild_pools,
    request_counters,
    sync_signals,
)
from servetune.gateway.heads import Heads
from servetune.gateway.keys import KeyRing
from servetune.gateway.pool import Pool, Router, Upstream
from servetune.gateway.redis_state import RedisState, replica_id
from servetune.gateway.refusals import quota_refused
from servetune.gateway.requests import ENDPOINTS, error_body
from servetune.gateway.rollout import RolloutControl
from servetune.gateway.tenants import (
    TenantRuntime,
    auth_changes,
    build_callers,
    describe_auth,
)
from servetune.gateway.upstream import ConnectionPool, fetch
from servetune.http import Exchange, HTTPServer
from servetune.http import Limits as HTTPLimits
from servetune.http import Router as HTTPRouter
from servetune.http.descriptors import descriptor_limit, fit_connections

log = logging.getLogger("servetune.gateway")

_SYNC_S = 0.5


class Gateway:
    def __init__(
        self, cfg: GatewayConfig, config_path: str | None = None, store: q.QuotaStore | None = None
    ) -> None:
        self.cfg = cfg
        self.config_path = config_path
        self.replica = replica_id()
        self.metrics = GatewayMetrics()
        self.metrics.gauges.append(self._gauges)
        self.metrics.counter_sources.append(self._route_counts)
        self._rebalanced: set[tuple[str, str]] = set()
        """(group, upstream) whose sessions were moved off it (audited once per outage)."""
        self.upstreams: dict[UpstreamKey, Upstream] = {}
        self.conns: dict[tuple[str, int], ConnectionPool] = {}
        self.signals: dict[UpstreamKey, LiveSignals] = {}
        self.redis: RedisState | None = None
        if store is not None:
            self.store = store
        elif cfg.redis:
            self.redis = RedisState(cfg.redis, cfg.redis_prefix, cfg.lease_s)
            self.store = self.redis
        else:
            self.store = q.MemoryQuota()
        self._memory: q.MemoryQuota | None = (
            self.store if isinstance(self.store, q.MemoryQuota) else None
        )
        """The in-memory quota, reserved and settled synchronously (None: a shared store)."""
        self.audit = AuditLog(cfg.audit_log, self.replica)
        self.router = Router({})
        self.rollouts = RolloutControl(
            self.router, self.audit, self.replica, self.redis, lambda: self.config_id
        )
        # per request: bound once, no lookup through self.rollouts
        self.canary_step: Callable[[], int | None] = self.rollouts.step_now
        self.observe: Callable[[Observation], None] = self.rollouts.observe
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping: set[asyncio.Future[None]] = set()
        self.streams: set[Flight] = set()
        """Streams being passed on (ended with an error event if still open at shutdown)."""
        self.server: HTTPServer | None = None
        self.port = 0
        self.head_deadlines = HeadDeadlines(cfg.timeouts.first_byte_s)
        self._fitted_open = 0
        self._apply(cfg)

    # -- configuration -----------------------------------------------------------------------
    def _apply(self, cfg: GatewayConfig) -> None:
        """Build keys, tenants, pools and routing from ``cfg`` (startup and reload)."""
        # what can fail (a key file, a sweep, a tokenizer), before anything changes
        callers = build_callers(cfg)
        old = getattr(self, "callers", None)
        if old is not None and old.auth and not callers.auth and cfg.auth != "off":
            raise ConfigError(
                "the new configuration has no tenant key: it would turn authentication off",
                hint="keep at least one tenant key, or write `auth: off` to open the gateway "
                "on purpose",
            )
        limits, counters = check_groups(cfg)
        # from here on nothing fails: a refused reload has changed nothing that runs (the
        # upstreams are the live ones, shared with in-flight requests)
        self.pools = rebuild_pools(cfg, limits, self.upstreams, getattr(self, "pools", {}))
        for pool in self.pools.values():
            pool.on_rebalance = self._on_rebalance
        self.cfg = cfg
        self.head_deadlines.timeout_s = cfg.timeouts.first_byte_s
        if self.server is not None:  # new connections get the new limits
            self.server.limits = self._http_limits(cfg)
        self.heads = Heads(cfg)
        self.callers = callers
        self.counters = counters
        self.default_counter, self.other_counters = request_counters(cfg, counters)
        weights = {g.name: g.weight for g in cfg.groups}
        rollout = self.rollouts.state
        if rollout is not None and not rollout.done:
            weights = {**weights, **rollout.weights}
        self.router.set(weights)
        self.config_id = config_hash(cfg.model_dump_json().encode())

    @property
    def keys(self) -> KeyRing:
        return self.callers.keys

    @property
    def tenants(self) -> dict[str, TenantRuntime]:
        return self.callers.tenants

    @property
    def auth(self) -> bool:
        return self.callers.auth

    async def reload(self) -> bool:
        """Re-read the configuration file; keep everything as it was if it is invalid."""
        if self.config_path is None:
            log.warning("reload: the gateway was started from flags; nothing to re-read")
            return False
        try:
            cfg = await asyncio.to_thread(load_config, self.config_path)
            if (cfg.redis or None) != (self.cfg.redis or None):
                raise ConfigError("redis cannot change on reload (restart the gateway)")
            old = dict(self.router.weights)
            old_callers = self.callers
            self._apply(cfg)
            self._sync_signals()
            changes = auth_changes(old_callers, self.callers)
        except ServetuneError as exc:
            log.error("reload refused, configuration kept: %s", exc)
            await asyncio.to_thread(
                self.audit.write, "reload_refused", reason=str(exc), config=self.config_id
            )
            return False
        await asyncio.to_thread(
            self.audit.write,
            "reload",
            reason=f"configuration re-read from {self.config_path}",
            old_weights=old,
            new_weights=dict(self.router.weights),
            config=self.config_id,
            routing=self.routing_policies(),
            auth=changes,
        )
        log.info(
            "configuration reloaded (%s): %s; tenants added %s, removed %s; tenant keys %d -> "
            "%d, admin keys %d -> %d",
            self.config_id,
            describe_auth(self.callers),
            changes["tenants_added"] or "none",
            changes["tenants_removed"] or "none",
            *changes["tenant_keys"],  # type: ignore[misc]
            *changes["admin_keys"],  # type: ignore[misc]
        )
        if not self.callers.auth:
            log.warning("gateway: %s", describe_auth(self.callers))
        return True

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self, host: str | None = None, port: int | None = None) -> int:
        h, p = host_port(self.cfg.listen)
        host = h if host is None else host
        port = p if port is None else port
        await self.store.start()
        if self.redis is not None:
            shared = await self.redis.get_weights()
            if shared:
                self.router.set({g: shared.get(g, 0.0) for g in self.router.weights})
            else:
                await self.redis.set_weights(dict(self.router.weights))
            self._tasks.append(asyncio.create_task(self._sync_loop(), name="gateway-sync"))
        self._sync_signals()
        if any(g.routing.policy != "least-loaded" for g in self.cfg.groups):
            await asyncio.to_thread(
                self.audit.write,
                "routing",
                reason="routing policies in force",
                config=self.config_id,
                routing=self.routing_policies(),
            )
        router = HTTPRouter()
        for path in ENDPOINTS:
            router.post(path, self._generate)
        router.get("/v1/models", self._models)
        router.get("/health", self._health)
        router.get("/metrics", self._metrics)
        AdminAPI(self).register(router)
        router.prefix("/v1/", self._not_found)
        self.server = HTTPServer(router, limits=self._http_limits(self.cfg))
        self.port = await self.server.start(host, port)
        (log.info if self.callers.auth else log.warning)("gateway: %s", describe_auth(self.callers))
        with contextlib.suppress(NotImplementedError, RuntimeError):
            asyncio.get_running_loop().add_signal_handler(
                signal.SIGHUP, lambda: asyncio.ensure_future(self.reload())
            )
        return self.port

    def _http_limits(self, cfg: GatewayConfig) -> HTTPLimits:
        """The client side's limits: body size, read deadlines, connection caps (the global
        one fitted to the descriptors this process may open: two per connection)."""
        t, c = cfg.timeouts, cfg.connections
        max_open = fit_connections(c.max_open, per_connection=2)
        if max_open < c.max_open and max_open != self._fitted_open:
            soft, _hard = descriptor_limit()
            log.warning(
                "gateway: connections.max_open %d lowered to %d: the descriptor limit (ulimit "
                "-n) is %d, two per connection; raise it to hold more",
                c.max_open,
                max_open,
                soft,
            )
        self._fitted_open = max_open
        return HTTPLimits(
            max_body_bytes=cfg.max_body_bytes,
            keepalive_timeout_s=t.client_idle_s,
            header_timeout_s=t.client_header_s,
            body_timeout_s=t.client_body_s,
            max_connections=max_open,
            max_connections_per_client=c.max_per_client,
        )

    def _sync_signals(self) -> None:
        sync_signals(self.cfg, self.upstreams, self.pools, self.signals, self._stopping)

    async def stop(self, drain_s: float = 10.0) -> None:
        await self.rollouts.stop(5.0)
        if self.server is not None:
            # streams still open just before the drain's end are ended with an error event
            # (the drain would cut them bare); their connections then close by themselves
            drain = asyncio.ensure_future(self.server.drain(drain_s))
            done, _ = await asyncio.wait({drain}, timeout=max(0.0, drain_s - min(1.0, drain_s / 4)))
            if not done:
                for f in list(self.streams):
                    f.shutdown_cut()
            await drain
        for t in self._tasks:
            if not await stop_task(t):
                log.warning("gateway: task %s did not stop within 5 s", t.get_name())
        for sig in self.signals.values():
            await sig.stop()
        for pool in self.conns.values():
            pool.close()
        self.head_deadlines.close()
        with contextlib.suppress(Exception):
            await self.rollouts.flush()
        await self.store.close()

    # -- routing -----------------------------------------------------------------------------
    def routing_policies(self) -> dict[str, dict[str, object]]:
        """Each group's routing configuration (the audit log's record of what decides)."""
        return {g.name: g.routing.model_dump() for g in self.cfg.groups}

    def _on_rebalance(self, pool: Pool, route: object) -> None:
        """A session's own upstream has its circuit open and it went to its next choice:
        audited once per upstream until its circuit closes again."""
        for u in pool.upstreams:
            key = (pool.name, u.url)
            if u.breaker.state == "closed":
                if key in self._rebalanced:
                    self._rebalanced.discard(key)
                    self._audit_bg("route_restored", pool, u.url, "circuit closed again")
            elif key not in self._rebalanced:
                self._rebalanced.add(key)
                self._audit_bg(
                    "route_rebalanced",
                    pool,
                    u.url,
                    "circuit open: its sessions go to their next rendezvous choice",
                )

    def _audit_bg(self, action: str, pool: Pool, url: str, reason: str) -> None:
        async def write() -> None:
            await asyncio.to_thread(
                self.audit.write,
                action,
                reason=reason,
                group=pool.name,
                upstream=url,
                policy=pool.balancer.policy,
            )

        fut: asyncio.Future[None] = asyncio.ensure_future(write())
        self._stopping.add(fut)
        fut.add_done_callback(self._stopping.discard)

    def _route_counts(self) -> list[tuple[str, str, str, float]]:
        out = []
        help_ = "Routing choices, by group, policy, upstream and reason."
        for p in self.pools.values():
            pol = p.balancer.policy
            for (up, reason), n in sorted(p.routes.items()):
                lab = labels(group=p.name, policy=pol, upstream=up, reason=reason)
                out.append(("route_decisions_total", help_, lab, float(n)))
        return out

    # -- helpers -----------------------------------------------------------------------------
    def conn_pool(self, u: Upstream) -> ConnectionPool:
        """The kept-alive connections to ``u``'s host and port."""
        key = (u.host, u.port)
        pool = self.conns.get(key)
        if pool is None:
            pool = self.conns[key] = ConnectionPool(u.host, u.port, self.cfg.timeouts.connect_s)
        return pool

    def healthy_groups(self) -> dict[str, bool] | None:
        """Which groups can serve (None: every circuit is closed, all can)."""
        pools = self.pools
        for p in pools.values():
            for u in p.upstreams:
                if u.breaker.state != "closed":
                    return {n: p.healthy() for n, p in pools.items()}
        return None

    # -- the generation path -----------------------------------------------------------------
    def _generate(self, ex: Exchange) -> Awaitable[None] | None:
        """Checks, reservation and the send run here, in the server's callback; a request
        continues on callbacks (:class:`~servetune.gateway.flight.Flight`) unless it has to
        wait, and only then as a task."""
        tenant = self.callers.authenticate(ex)
        if tenant is None:
            return None
        mem = self._memory
        if mem is not None and not tenant.quota.unlimited:
            # refused before its body is read: a flooding tenant's 429s cost no parsing
            refused = mem.at_limit(tenant.name, tenant.quota)
            if refused is not None:
                quota_refused(self.metrics, ex, tenant.name, refused)
                return None
        prep = prepare(ex, tenant, self.metrics, self.default_counter, self.other_counters)
        if prep is None:
            return None
        if mem is None:
            return self._admit_shared(ex, tenant, prep)
        res = None
        if not tenant.quota.unlimited:
            # one event loop: nothing can interleave between the check and the take
            got = mem.reserve_now(tenant.name, tenant.quota, prep.reserve, checked=True)
            if isinstance(got, q.Refusal):
                quota_refused(self.metrics, ex, tenant.name, got)
                return None
            res = got
        return Flight(self, ex, tenant, prep, res, mem.settle_now).start()

    async def _admit_shared(self, ex: Exchange, tenant: TenantRuntime, prep: Prepared) -> None:
        """The same with a shared store (Redis): its reservation and settlement are awaited."""
        res = None
        if not tenant.quota.unlimited:
            got = await self.store.reserve(tenant.name, tenant.quota, prep.reserve)
            if isinstance(got, q.Refusal):
                return quota_refused(self.metrics, ex, tenant.name, got)
            res = got
        flight = Flight(self, ex, tenant, prep, res, None)
        try:
            await flight.run()
        finally:
            if res is not None:
                await self.store.settle(res, flight.used)

    async def _sync_loop(self) -> None:
        """Redis: follow the shared weights and rollout state, push observations (see
        :meth:`RolloutControl.sync`); split each upstream's limit over the live replicas."""
        assert self.redis is not None
        while not cancel_requested():
            await asyncio.sleep(_SYNC_S)
            try:
                await self.rollouts.sync()
                replicas = await self.store.live_replicas()
                for u in self.upstreams.values():
                    share = None if u.configured is None else math.ceil(u.configured / replicas)
                    if share != u.share:
                        u.share = share
                        u.recompute()
            except Exception as exc:
                if cancel_requested():
                    return  # a cancellation that came out as an error: stop
                log.warning("gateway: Redis sync failed: %s", exc)

    # -- other endpoints ---------------------------------------------------------------------
    def _health(self, ex: Exchange) -> None:
        if self.redis is not None and not self.redis.available:
            # every quota'd request is refused (fail closed): not a healthy replica
            ex.respond_json(503, {"status": "shared state (Redis) unavailable"})
            return
        healthy = any(p.healthy() for p in self.pools.values())
        ex.respond_json(
            200 if healthy else 503, {"status": "ok" if healthy else "no healthy upstream"}
        )

    def _metrics(self, ex: Exchange) -> None:
        if not self.callers.may_read_metrics(ex, self.cfg.metrics_open):
            return
        ex.respond(200, self.metrics.render(), b"text/plain; version=0.0.4; charset=utf-8")

    def _not_found(self, ex: Exchange) -> None:
        ex.respond(
            404,
            error_body(
                f"the gateway does not serve {ex.method} {ex.path} (it serves "
                "/v1/chat/completions, /v1/completions, /v1/embeddings, /v1/models)",
                "invalid_request_error",
                "not_found",
            ),
        )

    async def _models(self, ex: Exchange) -> None:
        if self.callers.authenticate(ex) is None:
            return
        name = max(self.router.weights, key=self.router.weights.__getitem__)
        pool = self.pools.get(name) or next(iter(self.pools.values()))
        u = next((u for u in pool.upstreams if u.breaker.would_allow()), pool.upstreams[0])
        try:
            status, headers, body = await fetch(
                self.conn_pool(u), "GET", u.prefix + "/v1/models", timeout_s=10.0
            )
        except (OSError, ConnectionError, TimeoutError) as exc:
            ex.respond(
                502,
                error_body(f"upstream {u.url}: {exc}", "upstream_error", "upstream_unavailable"),
            )
            return
        ctype = next((v for k, v in headers if k == b"content-type"), b"application/json")
        ex.respond(status, body, ctype)

    def _gauges(self) -> list[tuple[str, str, float]]:
        out: list[tuple[str, str, float]] = []
        for p in self.pools.values():
            out.append(("queue_depth", labels(group=p.name), float(len(p.queue))))
            for u in p.upstreams:
                lab = labels(upstream=u.url, group=p.name)
                out.append(("upstream_inflight", lab, float(u.inflight)))
                out.append(
                    ("upstream_limit", lab, float(u.limit) if u.limit is not None else math.inf)
                )
                out.append(
                    ("upstream_circuit_open", lab, 0.0 if u.breaker.state == "closed" else 1.0)
                )
        for g, w in self.router.weights.items():
            out.append(("group_weight", labels(group=g), w))
        for p in self.pools.values():
            b = p.balancer
            if b.routed_blocks:
                est = b.matched_blocks / b.routed_blocks
                out.append(("route_prefix_hit_estimate", labels(group=p.name), est))
        if isinstance(self.store, q.MemoryQuota):
            for t in self.tenants:
                out.append(("tenant_inflight", labels(tenant=t), float(self.store.inflight(t))))
        st = self.rollouts.state
        if st is not None:
            out.append(("canary_step", labels(candidate=st.candidate), float(st.step or 0)))
            for s in ("waiting_peak", "running", "promoted", "rolled_back", "aborted"):
                out.append(("canary_state", labels(state=s), 1.0 if st.status == s else 0.0))
        return out
