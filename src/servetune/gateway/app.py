"""The gateway: an OpenAI-compatible front on servetune's HTTP layer.

A generation request (``/v1/chat/completions``, ``/v1/completions``, ``/v1/embeddings``) goes
through, in order — each step refuses with an OpenAI-shaped error and nothing forwarded:

1. **auth** — ``Authorization: Bearer KEY`` (or ``x-api-key``) → tenant (401 otherwise);
2. **body** — a JSON object with ``model`` and well-typed fields (400 otherwise);
3. **caps** — input tokens over ``max_input_tokens`` → 400; ``max_tokens`` over the cap →
   clamped (or 400 with ``max_tokens_policy: refuse``), and set to the cap when absent;
4. **quota** — concurrency, rpm and tpm reserved at once (``input + max_tokens × n × prompts``), 429
   with ``Retry-After`` when a bucket is short;
5. **route** — a group by weight (canary), then a slot on one of its upstreams, waiting in
   the fair queue when all are at their admission limit (429 past the deadline or bound);
6. **forward** — streamed through as it arrives; retried on another upstream only before the
   first byte (connect error, reset, timeout before the head, 500/502/503/504).
7. **settle** — the reservation to the engine's ``usage``; the slot freed; metrics and the
   canary's observation recorded.

``/v1/models`` is passed through (auth only); ``/health``, ``/metrics`` (Prometheus) and the
admin API (:mod:`servetune.gateway.admin_api`; admin key) are the gateway's own. A rollout is
driven by :mod:`servetune.gateway.rollout_control`; a request only reads its step and hands it
an observation. SIGHUP reloads the configuration without dropping streams: in-flight requests
finish on the objects they started with.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import signal
import time
from collections.abc import Awaitable, Callable

import orjson

from servetune.aio import cancel_requested, stop_task
from servetune.errors import ConfigError, ServetuneError
from servetune.gateway import quota as q
from servetune.gateway.admin_api import AdminAPI
from servetune.gateway.admission import LiveSignals, comfortable_concurrency
from servetune.gateway.audit import AuditLog, config_hash
from servetune.gateway.breaker import Breaker
from servetune.gateway.canary import Observation
from servetune.gateway.config import GatewayConfig, TenantLimits, host_port, load_config
from servetune.gateway.deadlines import HeadDeadlines
from servetune.gateway.exposition import GatewayMetrics, labels
from servetune.gateway.flight import Attempt, Flight, Prepared, TenantRuntime, retry_after
from servetune.gateway.keys import KeyRing, parse_hashed, read_key_file
from servetune.gateway.pool import Pool, Router, Slot, Upstream
from servetune.gateway.redis_state import RedisState, replica_id
from servetune.gateway.requests import (
    ENDPOINTS,
    BadRequest,
    InputCounter,
    error_body,
    parse_body,
    presented_key,
)
from servetune.gateway.rollout_control import RolloutControl
from servetune.gateway.upstream import ConnectionPool, fetch
from servetune.http import Exchange, HTTPServer
from servetune.http import Limits as HTTPLimits
from servetune.http import Router as HTTPRouter

log = logging.getLogger("servetune.gateway")

DEFAULT_TENANT = "default"
_SYNC_S = 0.5
_STREAM_HEADERS = [(b"Cache-Control", b"no-cache"), (b"X-Accel-Buffering", b"no")]


_USAGE_OPTION = b'{"stream_options":{"include_usage":true},'


def _with_usage_option(raw: bytes) -> bytes:
    """``raw`` (a JSON object without ``stream_options``, checked by the parse) with the
    option that makes the engine report usage, spliced in front of its first member."""
    return _USAGE_OPTION + raw[raw.index(b"{") + 1 :]


class Gateway:
    def __init__(
        self, cfg: GatewayConfig, config_path: str | None = None, store: q.QuotaStore | None = None
    ) -> None:
        self.cfg = cfg
        self.config_path = config_path
        self.replica = replica_id()
        self.metrics = GatewayMetrics()
        self.metrics.gauges.append(self._gauges)
        self.upstreams: dict[tuple[str, str], Upstream] = {}
        self.conns: dict[tuple[str, int], ConnectionPool] = {}
        self.signals: dict[tuple[str, str], LiveSignals] = {}
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
        self._canary_step: Callable[[], int | None] = self.rollouts.step_now
        self._observe: Callable[[Observation], None] = self.rollouts.observe
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping: set[asyncio.Future[None]] = set()
        self.server: HTTPServer | None = None
        self.port = 0
        self.head_deadlines = HeadDeadlines(cfg.timeouts.first_byte_s)
        self._apply(cfg)

    # -- configuration -----------------------------------------------------------------------
    def _apply(self, cfg: GatewayConfig) -> None:
        """Build keys, tenants, pools and routing from ``cfg`` (startup and reload)."""
        ring = KeyRing()
        for i, key in enumerate(cfg.admin_keys):
            ring.add(parse_hashed(key, f"admin_keys[{i}]"), "", admin=True)
        tenants: dict[str, TenantRuntime] = {}
        prio = {name: i for i, name in enumerate(cfg.queue.priorities)}
        default_prio = prio.get("standard", len(prio) // 2)
        for t in cfg.tenants:
            tenants[t.name] = self._tenant(
                cfg, t.name, t.weight, prio[t.priority], cfg.limits_of(t)
            )
            for j, key in enumerate(t.keys):
                ring.add(parse_hashed(key, f"tenants[{t.name}].keys[{j}]"), t.name)
        for path in cfg.key_files:
            for n, (stored, tenant) in enumerate(read_key_file(path), 1):
                name = tenant or f"key{n}"
                if name not in tenants:
                    tenants[name] = self._tenant(cfg, name, 1.0, default_prio, cfg.defaults)
                ring.add(parse_hashed(stored, f"{path}:{n}"), name)
        self.auth = ring.tenant_keys > 0
        if not self.auth:
            tenants.setdefault(
                DEFAULT_TENANT, self._tenant(cfg, DEFAULT_TENANT, 1.0, default_prio, cfg.defaults)
            )
        classes = len(cfg.queue.priorities)
        pools: dict[str, Pool] = {}
        counters: dict[str, InputCounter] = {}
        limits: dict[str, int | None] = {}
        for g in cfg.groups:  # what can fail (a sweep, a tokenizer), before anything changes
            limit = g.max_concurrency
            if g.from_sweep:
                swept, source = comfortable_concurrency(g.from_sweep)
                limit = swept if limit is None else min(limit, swept)
                log.info("group %s: admission limit %d per upstream (%s)", g.name, limit, source)
            limits[g.name] = limit
            counters[g.name] = InputCounter(g.tokenizer)
        # from here on nothing fails: a refused reload has changed nothing that runs (the
        # upstreams below are the live ones, shared with in-flight requests)
        for g in cfg.groups:
            limit = limits[g.name]
            ups = []
            for url in g.urls:
                u = self.upstreams.get((g.name, url))
                if u is None:
                    u = Upstream(
                        url, g.name, limit, Breaker(cfg.breaker.failures, cfg.breaker.cooldown_s)
                    )
                    self.upstreams[(g.name, url)] = u
                else:
                    u.breaker.threshold = cfg.breaker.failures
                    u.breaker.cooldown_s = cfg.breaker.cooldown_s
                    if u.configured != limit:
                        u.configured = u.adaptive = u.share = limit
                        u.recompute()
                ups.append(u)
            old = getattr(self, "pools", {}).get(g.name)
            pool = Pool(g.name, ups, classes, cfg.queue.priority_headroom)
            if old is not None:  # keep the waiters and the fairness counters
                pool.queue = old.queue
                pool.service_ewma_s = old.service_ewma_s
                # in-flight requests release into the pool they started on: one count for both
                old.running.extend([0] * (classes - len(old.running)))
                pool.running = old.running
            pools[g.name] = pool
        live = {(g.name, url) for g in cfg.groups for url in g.urls}
        for gone in [k for k in self.upstreams if k not in live]:
            del self.upstreams[gone]  # in-flight requests keep their reference
        self.cfg = cfg
        self.head_deadlines.timeout_s = cfg.timeouts.first_byte_s
        self._heads: dict[tuple[Upstream, str], bytes] = {}
        self._group_heads: dict[str, list[tuple[bytes, bytes]]] = {}
        self.keys = ring
        self.tenants = tenants
        self.pools = pools
        self.counters = counters
        weights = {g.name: g.weight for g in cfg.groups}
        rollout = self.rollouts.state
        if rollout is not None and not rollout.done:
            weights = {**weights, **rollout.weights}
        self.router.set(weights)
        # the count is made before routing picks a group: with the tokenizer of the first
        # group that names one (the estimate when none does); groups naming different
        # tokenizers (a canary of another model) each count, and the largest count is the
        # request's — the reservation and the input cap hold whichever group serves it
        exact = {g.tokenizer: counters[g.name] for g in cfg.groups if g.tokenizer}
        self.default_counter = next(iter(exact.values()), next(iter(counters.values())))
        self.other_counters = [c for c in exact.values() if c is not self.default_counter]
        self.config_id = config_hash(cfg.model_dump_json().encode())

    def _tenant(
        self, cfg: GatewayConfig, name: str, weight: float, priority: int, lim: TenantLimits
    ) -> TenantRuntime:
        return TenantRuntime(
            name,
            weight,
            priority,
            lim,
            q.Limits(lim.max_concurrency or 0, lim.rpm or 0, lim.tpm or 0),
            lim.queue_timeout_s or cfg.queue.timeout_s,
            lim.max_queued if lim.max_queued is not None else cfg.queue.max_queued_per_tenant,
        )

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
            self._apply(cfg)
            self._start_signals()
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
        )
        log.info("configuration reloaded (%s)", self.config_id)
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
        self._start_signals()
        router = HTTPRouter()
        for path in ENDPOINTS:
            router.post(path, self._generate)
        router.get("/v1/models", self._models)
        router.get("/health", self._health)
        router.get("/metrics", self._metrics)
        AdminAPI(self).register(router)
        router.prefix("/v1/", self._not_found)
        self.server = HTTPServer(
            router,
            limits=HTTPLimits(max_body_bytes=self.cfg.max_body_bytes, keepalive_timeout_s=75.0),
        )
        self.port = await self.server.start(host, port)
        with contextlib.suppress(NotImplementedError, RuntimeError):
            asyncio.get_running_loop().add_signal_handler(
                signal.SIGHUP, lambda: asyncio.ensure_future(self.reload())
            )
        return self.port

    def _start_signals(self) -> None:
        for g in self.cfg.groups:
            for url in g.urls:
                key = (g.name, url)
                u = self.upstreams[key]
                existing = self.signals.get(key)
                if existing is not None:
                    existing.upstream, existing.pool = u, self.pools[g.name]
                    existing.adaptive = g.adaptive
                    continue
                if u.configured is None:
                    continue  # nothing to tighten
                sig = LiveSignals(u, self.pools[g.name], self.cfg.metrics_interval_s, g.adaptive)
                sig.start()
                self.signals[key] = sig
        live = {(g.name, url) for g in self.cfg.groups for url in g.urls}
        for key in [k for k in self.signals if k not in live]:
            stopping = asyncio.ensure_future(self.signals.pop(key).stop())
            self._stopping.add(stopping)
            stopping.add_done_callback(self._stopping.discard)

    async def stop(self, drain_s: float = 10.0) -> None:
        await self.rollouts.stop(5.0)
        if self.server is not None:
            await self.server.drain(drain_s)
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

    # -- helpers -----------------------------------------------------------------------------
    def _conns(self, u: Upstream) -> ConnectionPool:
        key = (u.host, u.port)
        pool = self.conns.get(key)
        if pool is None:
            pool = self.conns[key] = ConnectionPool(u.host, u.port, self.cfg.timeouts.connect_s)
        return pool

    def _authenticate(self, ex: Exchange) -> TenantRuntime | None:
        """The tenant, or None after answering 401."""
        if not self.auth:
            return self.tenants[DEFAULT_TENANT]
        key = presented_key(ex)
        if key is None:
            ex.respond(
                401,
                error_body(
                    "missing API key: send 'Authorization: Bearer KEY'",
                    "invalid_request_error",
                    "invalid_api_key",
                ),
            )
            return None
        entry = self.keys.lookup(key)
        if entry is None or entry.admin:
            ex.respond(
                401, error_body("invalid API key", "invalid_request_error", "invalid_api_key")
            )
            return None
        return self.tenants[entry.tenant]

    def _refuse(
        self,
        ex: Exchange,
        tenant: str,
        reason: str,
        status: int,
        message: str,
        type_: str,
        retry_after_s: float | None = None,
    ) -> None:
        self.metrics.reject(tenant, reason)
        self.metrics.requests[(tenant, "", str(status))] += 1
        ex.respond(status, error_body(message, type_, reason), headers=retry_after(retry_after_s))

    # -- the generation path -----------------------------------------------------------------
    def _generate(self, ex: Exchange) -> Awaitable[None] | None:
        """Checks, reservation and the send run here, in the server's callback; a request
        continues on callbacks (:class:`~servetune.gateway.flight.Flight`) unless it has to
        wait, and only then as a task."""
        tenant = self._authenticate(ex)
        if tenant is None:
            return None
        mem = self._memory
        if mem is not None and not tenant.quota.unlimited:
            # refused before its body is read: a flooding tenant's 429s cost no parsing
            refused = mem.at_limit(tenant.name, tenant.quota)
            if refused is not None:
                self._quota_refused(ex, tenant.name, refused)
                return None
        prep = self._prepare(ex, tenant)
        if prep is None:
            return None
        if mem is None:
            return self._admit_shared(ex, tenant, prep)
        res = None
        if not tenant.quota.unlimited:
            # one event loop: nothing can interleave between the check and the take
            got = mem.reserve_now(tenant.name, tenant.quota, prep.reserve, checked=True)
            if isinstance(got, q.Refusal):
                self._quota_refused(ex, tenant.name, got)
                return None
            res = got
        return Flight(self, ex, tenant, prep, res, mem.settle_now).start()

    async def _admit_shared(self, ex: Exchange, tenant: TenantRuntime, prep: Prepared) -> None:
        """The same with a shared store (Redis): its reservation and settlement are awaited."""
        res = None
        if not tenant.quota.unlimited:
            got = await self.store.reserve(tenant.name, tenant.quota, prep.reserve)
            if isinstance(got, q.Refusal):
                return self._quota_refused(ex, tenant.name, got)
            res = got
        flight = Flight(self, ex, tenant, prep, res, None)
        try:
            await flight.run()
        finally:
            if res is not None:
                await self.store.settle(res, flight.used)

    def _prepare(self, ex: Exchange, tenant: TenantRuntime) -> Prepared | None:
        """Body, input count and caps checked; the bytes to send. None after a refusal."""
        name = tenant.name
        lim = tenant.limits
        try:
            parsed = parse_body(ex.body, ENDPOINTS[ex.path.rstrip("/")])
        except BadRequest as exc:
            self.metrics.reject(name, "bad_request")
            ex.respond(
                exc.status, error_body(exc.message, "invalid_request_error", None, exc.param)
            )
            return None
        body = parsed.body
        n_in = self.default_counter.count(parsed)
        for other in self.other_counters:  # only when groups name different tokenizers
            n_in = max(n_in, other.count(parsed))
        if lim.max_input_tokens is not None and n_in > lim.max_input_tokens:
            how = "counted" if self.default_counter.exact else "estimated"
            self._refuse(
                ex,
                name,
                "input_too_long",
                400,
                f"the prompt has {n_in} tokens ({how}); this key's limit is {lim.max_input_tokens}",
                "invalid_request_error",
            )
            return None
        headers: list[tuple[bytes, bytes]] = []
        max_tokens = parsed.max_tokens
        if (
            parsed.endpoint != "embeddings"
            and lim.max_tokens is not None
            and (max_tokens is None or max_tokens > lim.max_tokens)
        ):
            if max_tokens is not None and lim.max_tokens_policy == "refuse":
                self._refuse(
                    ex,
                    name,
                    "max_tokens_over_cap",
                    400,
                    f"max_tokens {max_tokens} is over this key's cap of {lim.max_tokens}",
                    "invalid_request_error",
                )
                return None
            if max_tokens is not None:
                headers.append((b"x-servetune-max-tokens-clamped", b"%d" % lim.max_tokens))
            max_tokens = lim.max_tokens
            body["max_tokens"] = max_tokens
            body.pop("max_completion_tokens", None)
            parsed.modified = True
        out_reserve = 0 if parsed.endpoint == "embeddings" else (max_tokens or 0) * parsed.choices
        if tenant.quota.tpm and parsed.endpoint != "embeddings" and max_tokens is None:
            self._refuse(
                ex,
                name,
                "max_tokens_required",
                400,
                "this key has a token quota: set max_tokens (the gateway reserves "
                "prompt + max_tokens before sending the request)",
                "invalid_request_error",
            )
            return None
        strip_usage = False
        payload = ex.body
        if parsed.stream and not parsed.usage_asked and parsed.endpoint != "embeddings":
            opts = body.get("stream_options")
            body["stream_options"] = {**(opts or {}), "include_usage": True}
            strip_usage = True
            if opts is None and not parsed.modified:
                payload = _with_usage_option(payload)  # the client's bytes, not a re-encode
            else:
                parsed.modified = True
        if parsed.modified:
            payload = orjson.dumps(body)
        return Prepared(payload, n_in, n_in + out_reserve, strip_usage, headers, parsed.stream)

    def _quota_refused(self, ex: Exchange, name: str, res: q.Refusal) -> None:
        if res.reason == "tpm_too_large":
            return self._refuse(ex, name, res.reason, 400, res.message, "invalid_request_error")
        if res.reason == "state_unavailable":
            return self._refuse(ex, name, res.reason, 503, res.message, "server_error", 1.0)
        type_ = {"rpm": "requests", "tpm": "tokens"}.get(res.reason, "requests")
        self._refuse(ex, name, res.reason, 429, res.message, type_, res.retry_after_s or 1.0)

    def _healthy(self) -> dict[str, bool] | None:
        pools = self.pools
        for p in pools.values():
            for u in p.upstreams:
                if u.breaker.state != "closed":
                    return {n: p.healthy() for n, p in pools.items()}
        return None

    def _acquire(
        self, pool: Pool, tenant: TenantRuntime, cost: float, avoid: list[Upstream] | None = None
    ) -> Awaitable[Slot]:
        """A slot in ``pool`` for ``tenant``'s request (fair queue, its limits)."""
        return pool.acquire(
            tenant.name,
            tenant.weight,
            tenant.priority,
            cost,
            tenant.queue_timeout_s,
            self.cfg.queue.max_queued,
            tenant.max_queued,
            avoid=avoid or (),
        )

    def _stream_headers(self, group: str) -> list[tuple[bytes, bytes]]:
        """The headers a stream from ``group`` is answered with (built once per group)."""
        h = self._group_heads.get(group)
        if h is None:
            h = [*_STREAM_HEADERS, (b"x-servetune-group", group.encode())]
            self._group_heads[group] = h
        return h

    def _request_bytes(self, u: Upstream, path: str, payload: bytes) -> bytes:
        head = self._heads.get((u, path))
        if head is None:
            head = self._heads[(u, path)] = self._request_head(u, path)
        return b"%s%d\r\n\r\n%s" % (head, len(payload), payload)

    def _request_head(self, u: Upstream, path: str) -> bytes:
        """The request head to ``u`` for ``path`` up to the Content-Length value (the same
        for every request: built once per upstream and path)."""
        head = (
            b"POST %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
            b"Accept: application/json, text/event-stream\r\n"
            % ((u.prefix + path).encode(), u.host.encode(), u.port)
        )
        key = next((g.api_key for g in self.cfg.groups if g.name == u.group), None)
        if key:
            head += b"Authorization: Bearer %s\r\n" % key.encode()
        return head + b"Content-Length: "

    def _record(
        self, tenant: str, group: str, att: Attempt, arrival_ns: int, n_in: int, step: int | None
    ) -> None:
        if att.code == 0 or not group:
            return
        now = time.perf_counter_ns()
        ok = 200 <= att.code < 300 and not att.error
        ttft = (att.first_ns - arrival_ns) / 1e9 if ok and att.first_ns else None
        e2e = (now - arrival_ns) / 1e9 if ok else None
        tpot = None  # a whole answer has none: its tokens came together (not 0 s apart)
        if ok and att.first_ns and att.output > 1 and not att.whole:
            tpot = (now - att.first_ns) / 1e9 / (att.output - 1)
        self.metrics.observe_request(
            tenant,
            group,
            att.code,
            ttft,
            tpot,
            e2e,
            att.prompt if att.usage_exact else n_in,
            att.output,
        )
        if step is not None and att.code != 499 and (att.sent_ns or att.error):
            # a request that failed before any answer (connect refused, reset, no head in
            # time, on every try) is an error of its group: the canary must see it
            # the canary compares the upstreams: latencies from the moment the request left
            c_ttft = (att.first_ns - att.sent_ns) / 1e9 if ok and att.first_ns else None
            c_e2e = (now - att.sent_ns) / 1e9 if ok else None
            self._observe(Observation(group, step, c_ttft, tpot, c_e2e, not ok))

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
        healthy = any(p.healthy() for p in self.pools.values())
        ex.respond_json(
            200 if healthy else 503, {"status": "ok" if healthy else "no healthy upstream"}
        )

    def _metrics(self, ex: Exchange) -> None:
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
        if self._authenticate(ex) is None:
            return
        name = max(self.router.weights, key=self.router.weights.__getitem__)
        pool = self.pools.get(name) or next(iter(self.pools.values()))
        u = next((u for u in pool.upstreams if u.breaker.would_allow()), pool.upstreams[0])
        try:
            status, headers, body = await fetch(
                self._conns(u), "GET", u.prefix + "/v1/models", timeout_s=10.0
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
        if isinstance(self.store, q.MemoryQuota):
            for t in self.tenants:
                out.append(("tenant_inflight", labels(tenant=t), float(self.store.inflight(t))))
        st = self.rollouts.state
        if st is not None:
            out.append(("canary_step", labels(candidate=st.candidate), float(st.step or 0)))
            for s in ("waiting_peak", "running", "promoted", "rolled_back", "aborted"):
                out.append(("canary_state", labels(state=s), 1.0 if st.status == s else 0.0))
        return out
