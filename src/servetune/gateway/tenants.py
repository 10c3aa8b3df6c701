"""Who may call the gateway and with what limits: the key ring and each tenant's runtime
settings, built from the configuration (at startup and on each reload), and the **auth** step
of a request.

Keys come from ``admin_keys``, each tenant's ``keys`` and the ``key_files`` (a key file's
tenant that the configuration does not name gets the ``defaults``). A key file's line without
a tenant is a tenant of its own, ``key-`` and the first 8 hex digits of its hash (stable
across reloads; two customers' anonymous keys never share a quota), and the same anonymous
key twice, or an anonymous name that is a configured tenant's, is refused.

Authentication (``auth``, :data:`~servetune.gateway.config.AuthMode`) is on whenever a tenant
key is configured. It is off only when no key at all is configured or ``auth: off`` says so;
admin keys without tenant keys are refused — a configuration (or a reload) that lost its
tenant keys must not open the gateway to everyone.
"""

from __future__ import annotations

from dataclasses import dataclass

from servetune.errors import ConfigError
from servetune.gateway import quota as q
from servetune.gateway.config import GatewayConfig, TenantLimits
from servetune.gateway.keys import KeyRing, parse_hashed, read_key_file
from servetune.gateway.requests import AMBIGUOUS, error_body, presented_key
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

    __slots__ = ("auth", "keys", "metrics_keys", "tenants")

    def __init__(
        self,
        keys: KeyRing,
        tenants: dict[str, TenantRuntime],
        metrics_keys: KeyRing | None = None,
    ) -> None:
        self.keys = keys
        self.tenants = tenants
        self.metrics_keys = metrics_keys or KeyRing()
        """Keys that may read ``/metrics`` only (the admin keys may too)."""
        self.auth = keys.tenant_keys > 0
        """Keys are checked (False: no tenant key configured, every request is the default
        tenant's)."""

    def authenticate(self, ex: Exchange) -> TenantRuntime | None:
        """The tenant, or None after answering 401."""
        if not self.auth:
            return self.tenants[DEFAULT_TENANT]
        key = presented_key(ex)
        if key == AMBIGUOUS:
            ex.respond(
                400,
                error_body(
                    "more than one API key in the request (two Authorization headers, or "
                    "different keys in Authorization and x-api-key): send one",
                    "invalid_request_error",
                    "ambiguous_api_key",
                ),
            )
            return None
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

    def may_read_metrics(self, ex: Exchange, open_: bool) -> bool:
        """``/metrics`` for an admin or metrics key (anyone with ``metrics_open``); otherwise
        answers 401/403 and returns False: the page names tenants, their use and upstreams."""
        if open_:
            return True
        key = presented_key(ex)
        if key is not None:
            entry = self.keys.lookup(key)
            if (entry is not None and entry.admin) or self.metrics_keys.lookup(key) is not None:
                return True
        if not self.keys.count - self.keys.tenant_keys and not self.metrics_keys.count:
            msg = (
                "/metrics needs a key: configure metrics_keys or admin_keys (servetune gateway "
                "keygen --admin), or metrics_open: true"
            )
        else:
            msg = "/metrics needs an admin or metrics key"
        ex.respond(403 if key else 401, error_body(msg, "invalid_request_error", "metrics_key"))
        return False


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
    configured = set(tenants)
    anonymous: dict[str, str] = {}
    for path in cfg.key_files:
        for n, (stored, tenant) in enumerate(read_key_file(path), 1):
            where = f"{path}:{n}"
            digest = parse_hashed(stored, where)
            name = tenant or anonymous_name(digest)
            if tenant is None:
                if name in anonymous or name in configured:
                    other = anonymous.get(name) or f"the configuration's tenant {name!r}"
                    raise ConfigError(
                        f"{where}: the anonymous key's tenant {name!r} is also {other}",
                        hint="give each customer its own key, or name the tenant after the key "
                        "('KEY TENANT') to share a quota on purpose",
                    )
                anonymous[name] = where
            if name not in tenants:
                tenants[name] = tenant_runtime(cfg, name, 1.0, default_prio, cfg.defaults)
            ring.add(digest, name)
    check_auth(cfg, ring)
    if ring.tenant_keys == 0:
        tenants.setdefault(
            DEFAULT_TENANT, tenant_runtime(cfg, DEFAULT_TENANT, 1.0, default_prio, cfg.defaults)
        )
    metrics = KeyRing()
    for i, key in enumerate(cfg.metrics_keys):
        metrics.add(parse_hashed(key, f"metrics_keys[{i}]"), "")
    return Callers(ring, tenants, metrics)


def anonymous_name(digest: bytes) -> str:
    """The tenant of a key file's key that names none: its own, from its hash."""
    return "key-" + digest[:4].hex()


def check_auth(cfg: GatewayConfig, ring: KeyRing) -> None:
    """Refuse a configuration that would open the gateway without saying so."""
    admins = ring.count - ring.tenant_keys
    if cfg.auth == "off":
        if ring.tenant_keys:
            raise ConfigError(
                f"auth: off, but {ring.tenant_keys} tenant key(s) are configured",
                hint="remove `auth: off` to check the keys, or remove the keys",
            )
        return
    if ring.tenant_keys == 0 and (admins or cfg.auth == "keys"):
        why = f"{admins} admin key(s) but" if admins else "auth: keys but"
        raise ConfigError(
            f"{why} no tenant key: every client would be served unauthenticated",
            hint="add tenant keys (tenants[].keys or key_files), or write `auth: off` to run "
            "the gateway open on purpose",
        )


def describe_auth(callers: Callers) -> str:
    """One line for the log: authenticated or not, keys and tenants."""
    admins = callers.keys.count - callers.keys.tenant_keys
    if not callers.auth:
        return (
            f"authentication OFF: every client is tenant {DEFAULT_TENANT!r}, unauthenticated "
            f"({admins} admin key(s))"
        )
    return (
        f"authentication on: {callers.keys.tenant_keys} tenant key(s) for "
        f"{len(callers.tenants)} tenant(s), {admins} admin key(s)"
    )


def auth_changes(old: Callers, new: Callers) -> dict[str, object]:
    """What a reload changed in authentication (for the log and the audit line)."""
    ok, nk = old.keys, new.keys
    return {
        "auth": [old.auth, new.auth],
        "tenants_added": sorted(set(new.tenants) - set(old.tenants)),
        "tenants_removed": sorted(set(old.tenants) - set(new.tenants)),
        "tenant_keys": [ok.tenant_keys, nk.tenant_keys],
        "admin_keys": [ok.count - ok.tenant_keys, nk.count - nk.tenant_keys],
    }
