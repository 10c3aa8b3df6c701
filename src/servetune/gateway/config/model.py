"""The gateway's configuration: the model of ``gateway.yaml`` and of the first-run flags (read
into it by :mod:`servetune.gateway.config.load`).

A configuration names upstream *groups* (a baseline and, during a rollout, a candidate), the
*tenants* with their keys, limits, weight and priority class, and the gateway's own policy
(queue, timeouts, retries, circuit breaker, canary analysis, audit log, shared state)::

    listen: 127.0.0.1:8080
    admin_keys: [sha256:9f86d0...]          # hashed; `servetune gateway keygen --admin`
    redis: redis://127.0.0.1:6379/0         # optional: replicas share counters exactly
    groups:
      - name: baseline
        urls: [http://10.0.0.5:8000/v1]
        max_concurrency: 48                 # admission limit per upstream (or from_sweep)
        from_sweep: sweeps/qwen-a100        # the sweep's comfortable concurrency
        routing: {policy: score}            # least-loaded (default), round-robin, session,
                                            # prefix, score (servetune.routing)
      - name: candidate
        urls: [http://10.0.0.6:8000/v1]
        weight: 0                           # traffic share; `servetune rollout` moves it
    queue:
      priority_headroom: 1                  # slots per upstream kept for a higher class
    tenants:
      - name: search
        keys: [sha256:2c26b4...]
        weight: 2
        priority: interactive
        max_concurrency: 16
        rpm: 600
        tpm: 200000
        max_tokens: 1024                    # clamp (default) or refuse over it
        max_input_tokens: 8192

Every limit left out is unlimited. Without any key configured (and with ``auth: off``) the
gateway does not authenticate and everyone is the tenant ``default`` (its limits come from
``defaults``), said in a warning at start and on every reload; admin keys without any tenant
key are refused (``auth: off`` makes the open gateway explicit), and a reload cannot turn
authentication off unless its configuration says ``auth: off``.
Unknown fields are errors (a typo must not silently drop a limit).
"""

from __future__ import annotations

import re
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from servetune.errors import ConfigError
from servetune.routing.config import RoutingConfig

DEFAULT_PRIORITIES = ("interactive", "standard", "batch")
"""Priority classes, highest first: a waiting request of a higher class is always sent first;
inside a class tenants share by weighted tokens."""

MaxTokensPolicy = Literal["clamp", "refuse"]
AuthMode = Literal["auto", "keys", "off"]
"""``keys``: every request needs a tenant key (a configuration without one is refused);
``off``: nobody is authenticated — an explicit choice, logged as a warning at every start and
reload (refused when tenant keys are configured); ``auto``: keys when tenant keys are
configured, open (with the same warning) when no key at all is, refused when only admin keys
are (a configuration that lost its tenant keys must not open the gateway)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TenantLimits(_Strict):
    """Limits of one tenant (None = unlimited)."""

    max_concurrency: int | None = Field(default=None, ge=1)
    """Requests of this tenant in the gateway at once (waiting or streaming)."""
    rpm: int | None = Field(default=None, ge=1)
    """Requests per minute (a token bucket of this size refilled continuously)."""
    tpm: int | None = Field(default=None, ge=1)
    """Tokens per minute, input + output; a request reserves input + max_tokens at admission."""
    max_tokens: int | None = Field(default=None, ge=1)
    """Cap on the output tokens a request may ask for (and the default when it asks none)."""
    max_choices: int | None = Field(default=None, ge=1)
    """Sequences a request may ask for (``n``, ``best_of``); over it → 400. Unset: any number,
    each charged (the reservation is input + max_tokens × choices)."""
    max_tokens_policy: MaxTokensPolicy = "clamp"
    """clamp: lower max_tokens to the cap; refuse: answer 400 when a request asks more."""
    max_input_tokens: int | None = Field(default=None, ge=1)
    """Prompt tokens over this are refused with 400."""
    queue_timeout_s: float | None = Field(default=None, gt=0)
    """Longest wait for an upstream slot (default: ``queue.timeout_s``)."""
    max_queued: int | None = Field(default=None, ge=0)
    """Requests of this tenant waiting at once (default: ``queue.max_queued_per_tenant``)."""


class Tenant(TenantLimits):
    name: str
    keys: list[str] = Field(default_factory=list)
    """Hashed API keys (``sha256:<hex>``), see :mod:`servetune.gateway.keys`."""
    weight: float = Field(default=1.0, gt=0)
    """Share of the upstreams' tokens when requests wait (fair queueing)."""
    priority: str = "standard"

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_.:-]{1,64}", v):
            raise ValueError(
                "a tenant name is 1-64 characters of letters, digits, '_', '.', ':' or '-'"
            )
        return v


class Group(_Strict):
    """A set of interchangeable upstreams (replicas of one engine configuration)."""

    name: str
    urls: list[str] = Field(min_length=1)
    """Base URLs ending in /v1 (``http://host:port/v1``); a bare ``http://host:port`` gets /v1."""
    weight: float = Field(default=100.0, ge=0)
    """Traffic share among groups (relative)."""
    max_concurrency: int | None = Field(default=None, ge=1)
    """Admission limit per upstream URL: requests beyond it wait in the gateway."""
    from_sweep: str | None = None
    """A servetune sweep directory whose comfortable concurrency sets ``max_concurrency``."""
    adaptive: bool = True
    """Tighten the admission limit on the upstream's own signals (waiting queue, KV-cache use
    from its /metrics); never above the configured limit."""
    tokenizer: str | None = None
    """Local tokenizer (folder or tokenizer.json) of the served model, for exact input counts."""
    api_key: str | None = None
    """Bearer token the gateway sends upstream (the client's key is never forwarded)."""
    routing: RoutingConfig = Field(default_factory=RoutingConfig)
    """How a request's upstream is chosen (:mod:`servetune.routing.policies`)."""

    @field_validator("urls")
    @classmethod
    def _urls(cls, v: list[str]) -> list[str]:
        out = []
        for url in v:
            url = url.strip().rstrip("/")
            if not re.match(r"^https?://[^/\s]+(/.*)?$", url):
                raise ValueError(f"{url!r} is not an http(s) URL")
            try:  # a port out of 0-65535 or not a number surfaced later as a traceback
                _ = urlsplit(url).port
            except ValueError as exc:
                raise ValueError(f"{url!r} has no valid port ({exc})") from None
            if not url.endswith("/v1"):
                url += "/v1"
            out.append(url)
        return out


class QueuePolicy(_Strict):
    max_queued: int = Field(default=1024, ge=0)
    """Requests waiting in the gateway at once, all tenants."""
    max_queued_per_tenant: int = Field(default=256, ge=0)
    timeout_s: float = Field(default=30.0, gt=0)
    """Longest wait for an upstream slot before a 429."""
    priorities: list[str] = Field(default_factory=lambda: list(DEFAULT_PRIORITIES))
    """Priority classes, highest first."""
    priority_headroom: int = Field(default=1, ge=0)
    """Free slots of each upstream that a request may not take while a request of a higher
    priority class is running or waiting in its group (kept for that class; 0: none). With no
    higher-class request active, every slot is open to all (see :mod:`servetune.gateway.pool`)."""
    fair_share_s: float = Field(default=10.0, ge=0, le=3600)
    """Fair share of each group's slots among its active tenants, without per-tenant caps: a
    tenant that sent a request within this many seconds (also the time constant of its
    request rate) has slots kept free for its next requests — the ``fair_share_quantile`` of
    its concurrency, at most its share — which the others may not take (0: off; see
    :mod:`servetune.gateway.shares`)."""
    fair_share_ahead: int | None = Field(default=None, ge=1, le=1024)
    """The most slots kept free for one active tenant (None: its share of the slots, rounded
    down)."""
    fair_share_burst: int = Field(default=1, ge=0, le=64)
    """Slots over an upstream's admission limit that a tenant may take when none is free to
    it, while its mean concurrency is below its share and it runs fewer than its
    ``fair_share_quantile`` (0: the limit is never passed)."""
    fair_share_quantile: float = Field(default=0.99, ge=0.5, lt=1.0)
    """The quantile of a tenant's concurrency (Poisson of its rate × its mean slot time) its
    reservation covers."""
    output_weight: float = Field(default=1.0, ge=0)
    """Fair-queueing cost of an output token relative to an input token."""


class Timeouts(_Strict):
    connect_s: float = Field(default=5.0, gt=0)
    first_byte_s: float = Field(default=600.0, gt=0)
    """Longest wait for the upstream's response head (an engine queue can be long)."""
    idle_s: float = Field(default=60.0, gt=0)
    """A stream that sends nothing for this long ends with a terminal error event; a whole
    (non-streamed) answer whose body stops this long after its head is answered 502."""
    client_header_s: float = Field(default=10.0, gt=0, le=3600)
    """A client's request head (request line and headers) must be in within this long of its
    first byte, and a new connection must begin its first request within it (408, closed)."""
    client_body_s: float = Field(default=30.0, gt=0, le=3600)
    """A client's whole request body must be in within this long of its head (408, closed)."""
    client_idle_s: float = Field(default=75.0, gt=0, le=3600)
    """An idle keep-alive client connection is closed after this long."""


class ConnectionLimits(_Strict):
    """Open client connections (see the Security section of docs/gateway.md). At a cap the
    connection that has waited longest for its client — idle, or still sending its request —
    is closed to make room; when every one is being answered the new one is refused (429 with
    ``Retry-After``, naming the cap)."""

    max_open: int = Field(default=8192, ge=1, le=1_000_000)
    """All clients. Lowered at start to what the process's descriptor limit holds (two per
    connection: the client's and the upstream's), with a warning."""
    max_per_client: int = Field(default=1024, ge=1, le=1_000_000)
    """From one client address (behind a proxy or NAT, all its clients are one address)."""


class BreakerPolicy(_Strict):
    failures: int = Field(default=5, ge=1)
    """Consecutive failures (connect errors, 5xx) that open an upstream's circuit."""
    cooldown_s: float = Field(default=10.0, gt=0)
    """Open this long, then one probe request decides (half-open)."""


class CanaryPolicy(_Strict):
    """How a rollout step is judged (see :mod:`servetune.gateway.canary`)."""

    alpha: float = Field(default=0.05, gt=0, lt=0.5)
    """Error probability of a decision, split over the metrics compared."""
    min_requests: int = Field(default=100, ge=10)
    """Per group and step, before any decision."""
    batch_size: int = Field(default=5, ge=1)
    """Requests of each group per paired batch (the unit of the test)."""
    min_batches: int = Field(default=10, ge=3)
    tolerance: float = Field(default=0.10, ge=0)
    """A latency ratio up to 1 + tolerance (candidate / baseline, geometric mean) is 'as good'."""
    error_tolerance: float = Field(default=0.01, ge=0)
    """Error-rate difference (absolute) still 'as good'."""
    tail_quantile: float | None = Field(default=0.95, gt=0.5, lt=1)
    """The tail judged besides the geometric means: the candidate's share of requests above
    (1 + tolerance) × the baseline's latency at this quantile against the baseline's share
    above it (None: the tail is not judged)."""
    tail_margin: float = Field(default=0.02, gt=0, lt=0.5)
    """The tail passes when the candidate's share above that threshold is at most this much
    over the baseline's (0.95 and 0.02: the candidate's P93 ≤ 1.1 × the baseline's P95); it
    is worse as soon as any excess is established."""
    max_step_s: float = Field(default=900.0, gt=0)
    """A step still undecided after this long is rolled back (``on_timeout``)."""
    on_timeout: Literal["rollback", "promote"] = "rollback"
    peak_hours: list[str] = Field(default_factory=list)
    """Windows in which no step starts: ``"Mon-Fri 09:00-18:00"``, ``"Sat 10:00-14:00"``."""
    timezone: str = "UTC"
    quality_verdict_file: str | None = None
    """A `servetune quality` verdict (JSON with ``"verdict": "pass"|"fail"|"inconclusive"``)
    that must pass before the candidate takes all traffic; fail rolls back at once."""
    quality_command: list[str] | None = None
    """A command printing such a verdict JSON, run before the last step (instead of a file)."""


class GatewayConfig(_Strict):
    listen: str = "127.0.0.1:8080"
    groups: list[Group] = Field(min_length=1)
    tenants: list[Tenant] = Field(default_factory=list)
    defaults: TenantLimits = Field(default_factory=TenantLimits)
    """Limits of the tenant ``default`` (no keys configured) and of every tenant field left out."""
    auth: AuthMode = "auto"
    """Whether requests are authenticated (see :data:`AuthMode`)."""
    admin_keys: list[str] = Field(default_factory=list)
    metrics_keys: list[str] = Field(default_factory=list)
    """Hashed keys that may read ``/metrics`` (besides the admin keys), e.g. Prometheus'."""
    metrics_open: bool = False
    """Serve ``/metrics`` without a key. It names every tenant, its token use and every
    upstream URL, so by default it needs an admin or metrics key (403 when none is configured)."""
    key_files: list[str] = Field(default_factory=list)
    """Files of ``KEY [TENANT]`` lines (a hashed ``sha256:`` key, or a plain one hashed on load)."""
    max_body_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)
    retries: int = Field(default=2, ge=0)
    """Other upstreams tried when one fails before its first response byte."""
    queue: QueuePolicy = Field(default_factory=QueuePolicy)
    timeouts: Timeouts = Field(default_factory=Timeouts)
    connections: ConnectionLimits = Field(default_factory=ConnectionLimits)
    breaker: BreakerPolicy = Field(default_factory=BreakerPolicy)
    canary: CanaryPolicy = Field(default_factory=CanaryPolicy)
    redis: str | None = None
    """``redis://host:port/db``: replicas share counters, reservations and canary state."""
    redis_prefix: str = "servetune:gw:"
    lease_s: float = Field(default=15.0, gt=1)
    """A replica's concurrency slots expire this long after it stops renewing them."""
    audit_log: str = "gateway-audit.jsonl"
    metrics_interval_s: float = Field(default=1.0, gt=0)
    """How often each upstream's /metrics is read for adaptive admission."""

    @field_validator("auth", mode="before")
    @classmethod
    def _auth(cls, v: object) -> object:
        # YAML 1.1 reads a bare `off` as false and `on` as true
        if v is False:
            return "off"
        if v is True:
            return "keys"
        return v

    @field_validator("listen")
    @classmethod
    def _listen(cls, v: str) -> str:
        host_port(v)
        return v

    @model_validator(mode="after")
    def _check(self) -> GatewayConfig:
        names = [g.name for g in self.groups]
        if len(set(names)) != len(names):
            raise ValueError(f"group names repeat: {names}")
        tnames = [t.name for t in self.tenants]
        if len(set(tnames)) != len(tnames):
            raise ValueError(f"tenant names repeat: {tnames}")
        for t in self.tenants:
            if t.priority not in self.queue.priorities:
                raise ValueError(
                    f"tenant {t.name}: priority {t.priority!r} is not one of "
                    f"{self.queue.priorities} (queue.priorities)"
                )
        if not any(g.weight > 0 for g in self.groups):
            raise ValueError("every group has weight 0: no upstream would get traffic")
        return self

    def group(self, name: str) -> Group:
        for g in self.groups:
            if g.name == name:
                return g
        raise ConfigError(
            f"no upstream group named {name!r}", hint=f"groups: {[g.name for g in self.groups]}"
        )

    def limits_of(self, tenant: Tenant) -> TenantLimits:
        """The tenant's limits with ``defaults`` filling what it leaves out."""
        given = tenant.model_dump(include=set(TenantLimits.model_fields), exclude_unset=True)
        merged = self.defaults.model_dump()
        merged.update(given)
        return TenantLimits.model_validate(merged)


def host_port(listen: str) -> tuple[str, int]:
    """``host:port`` → (host, port); ``:8080`` and ``8080`` listen on 127.0.0.1."""
    text = listen.strip()
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "", text
    host = host.strip("[]") or "127.0.0.1"
    try:
        p = int(port)
    except ValueError as exc:
        raise ValueError(f"listen address {listen!r}: the port is not a number") from exc
    if not 0 <= p <= 65535:
        raise ValueError(f"listen address {listen!r}: port out of range")
    return host, p
