"""Who may call the gateway and with what limits: the key ring and each tenant's runtime
settings, built from the configuration (at startup and on each reload), and the **auth** step
of a request.

Keys come from ``admin_keys``, each tenant's ``keys`` and the ``key_files`` (a key file's
tenant that the configuration does not name gets the ``defaults``). With no tenant key at
all the gateway is open: every request is the ``default`` tenant's.
"""

from __future__ import annotations

from dataclasses import dataclass

from servetune.gateway import quota as q
from servetune.gateway.config import GatewayConfig, TenantLimits
from servetune.gateway.keys import KeyRing, parse_hashed, read_key_file
from servetune.gateway.requests import error_body, presented_key
from servetune.http import Exchange

DEFAULT_TENANT = "default"


@dataclass
class TenantRuntime:
    name: str
    weight: float
    priority: int
    limits: TenantLimits
    quota: q.Limits
    queue_timeout_s: float
    max_queued: int


def tenant_runtime(
    cfg: GatewayConfig, name: str, weight: float, priority: int, lim: TenantLimits
) -> TenantRuntime:
    """A tenant's settings: its limits, with the queue's where it sets none."""
    return TenantRuntime(
        name,
        weight,
        priority,
        lim,
        q.Limits(lim.max_concurrency or 0, lim.rpm or 0, lim.tpm or 0),
        lim.queue_timeout_s or cfg.queue.timeout_s,
        lim.max_queued if lim.max_queued is not None else cfg.queue.max_queued_per_tenant,
    )


class Callers:
    """The keys and the tenants they belong to (one configuration's; replaced on reload)."""

    __slots__ = ("auth", "keys", "tenants")

    def __init__(self, keys: KeyRing, tenants: dict[str, TenantRuntime]) -> None:
        self.keys = keys
        self.tenants = tenants
        self.auth = keys.tenant_keys > 0
        """Keys are checked (False: no tenant key configured, every request is the default
        tenant's)."""

    def authenticate(self, ex: Exchange) -> TenantRuntime | None:
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


def build_callers(cfg: GatewayConfig) -> Callers:
    """The key ring and tenants of ``cfg`` (a bad key or key file raises
    :class:`~servetune.errors.ConfigError`; nothing running is changed)."""
    ring = KeyRing()
    for i, key in enumerate(cfg.admin_keys):
        ring.add(parse_hashed(key, f"admin_keys[{i}]"), "", admin=True)
    tenants: dict[str, TenantRuntime] = {}
    prio = {name: i for i, name in enumerate(cfg.queue.priorities)}
    default_prio = prio.get("standard", len(prio) // 2)
    for t in cfg.tenants:
        tenants[t.name] = tenant_runtime(cfg, t.name, t.weight, prio[t.priority], cfg.limits_of(t))
        for j, key in enumerate(t.keys):
            ring.add(parse_hashed(key, f"tenants[{t.name}].keys[{j}]"), t.name)
    for path in cfg.key_files:
        for n, (stored, tenant) in enumerate(read_key_file(path), 1):
            name = tenant or f"key{n}"
            if name not in tenants:
                tenants[name] = tenant_runtime(cfg, name, 1.0, default_prio, cfg.defaults)
            ring.add(parse_hashed(stored, f"{path}:{n}"), name)
    if ring.tenant_keys == 0:
        tenants.setdefault(
            DEFAULT_TENANT, tenant_runtime(cfg, DEFAULT_TENANT, 1.0, default_prio, cfg.defaults)
        )
    return Callers(ring, tenants)
