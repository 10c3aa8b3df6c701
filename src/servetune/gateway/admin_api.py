"""The gateway's admin API, answered only with an admin key (``admin_keys`` in the
configuration; 401 without a key, 403 with another key):

- ``GET /admin/state`` — weights, groups and their upstreams (in flight, limits, circuit,
  live signals), tenants, the rollout;
- ``GET /admin/rollout`` — the rollout's state (404 when none has run);
  ``POST /admin/rollout`` ``{"candidate": GROUP, "steps": [5, 25, 50, 100]}`` — start one
  (202; 409 when one is running or the group is unknown);
  ``DELETE /admin/rollout`` — abort it: weights restored (409 when none is running);
- ``POST /admin/weights`` ``{"weights": {"GROUP": number >= 0, ...}}`` — set group weights
  (409 while a rollout is running: abort it first);
- ``POST /admin/reload`` — re-read the configuration file (409 when refused).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, Protocol

import orjson

from servetune.errors import ConfigError, ServetuneError
from servetune.gateway.config import GatewayConfig
from servetune.gateway.keys import KeyRing
from servetune.gateway.pool import Pool, Router
from servetune.gateway.quota import QuotaStore
from servetune.gateway.requests import BadRequest, error_body, presented_key
from servetune.gateway.rollout import RolloutControl, parse_steps
from servetune.http import Exchange
from servetune.http import Router as HTTPRouter

DEFAULT_STEPS: list[float] = [5.0, 25.0, 50.0, 100.0]


class Gateway(Protocol):
    """What the admin API reads and drives (:class:`servetune.gateway.app.Gateway`)."""

    @property
    def cfg(self) -> GatewayConfig: ...
    @property
    def keys(self) -> KeyRing: ...
    @property
    def replica(self) -> str: ...
    @property
    def store(self) -> QuotaStore: ...
    @property
    def config_id(self) -> str: ...
    @property
    def auth(self) -> bool: ...
    @property
    def router(self) -> Router: ...
    @property
    def pools(self) -> Mapping[str, Pool]: ...
    @property
    def tenants(self) -> Collection[str]: ...
    @property
    def rollouts(self) -> RolloutControl: ...
    async def reload(self) -> bool: ...


def gateway_state(gw: Gateway) -> dict[str, Any]:
    """What ``GET /admin/state`` answers."""
    st = gw.rollouts.state
    return {
        "replica": gw.replica,
        "store": gw.store.name,
        "config": gw.config_id,
        "auth": gw.auth,
        "weights": dict(gw.router.weights),
        "groups": {
            name: {
                "queued": len(p.queue),
                "upstreams": [
                    {
                        "url": u.url,
                        "inflight": u.inflight,
                        "limit": u.limit,
                        "configured": u.configured,
                        "adaptive": u.adaptive,
                        "share": u.share,
                        "circuit": u.breaker.state,
                        "signals": u.signals,
                    }
                    for u in p.upstreams
                ],
            }
            for name, p in gw.pools.items()
        },
        "tenants": sorted(gw.tenants),
        "rollout": None if st is None else st.model_dump(),
    }


def _steps(given: Any) -> list[float]:
    """The rollout's steps from a request body: a list of percentages (or ``"5,25,100"``);
    anything else is a 400 that says what was expected (not a 500 from the parse)."""
    if given is None:
        return list(DEFAULT_STEPS)
    ok = isinstance(given, str) or (
        isinstance(given, list)
        and all(isinstance(x, int | float) and not isinstance(x, bool) for x in given)
    )
    if not ok:
        raise BadRequest(
            f"'steps' must be a list of percentages such as [5, 25, 50, 100], got "
            f"{orjson.dumps(given).decode()[:80]}",
            param="steps",
        )
    try:
        return parse_steps(given)
    except ConfigError as exc:  # a range or order mistake of the request: 400, not 409
        raise BadRequest(f"{exc.message} ({exc.hint})" if exc.hint else exc.message) from None


class AdminAPI:
    """The admin endpoints of ``gw``."""

    def __init__(self, gw: Gateway) -> None:
        self.gw = gw

    def register(self, router: HTTPRouter) -> None:
        router.get("/admin/state", self.state)
        router.add(("GET", "POST", "DELETE"), "/admin/rollout", self.rollout)
        router.post("/admin/weights", self.weights)
        router.post("/admin/reload", self.reload)

    def _is_admin(self, ex: Exchange) -> bool:
        """True for an admin key; otherwise answers 401/403 and returns False."""
        key = presented_key(ex)
        entry = self.gw.keys.lookup(key) if key is not None else None
        if entry is not None and entry.admin:
            return True
        if not self.gw.cfg.admin_keys:
            msg = "the admin API is off: configure admin_keys (servetune gateway keygen --admin)"
        else:
            msg = "the admin API needs an admin key"
        ex.respond(403 if key else 401, error_body(msg, "invalid_request_error", "admin_only"))
        return False

    def state(self, ex: Exchange) -> None:
        if self._is_admin(ex):
            ex.respond_json(200, gateway_state(self.gw))

    async def rollout(self, ex: Exchange) -> None:
        if not self._is_admin(ex):
            return
        rollouts = self.gw.rollouts
        if ex.method == "GET":
            if rollouts.state is None:
                ex.respond(404, error_body("no rollout has run", "invalid_request_error", "none"))
            else:
                ex.respond_json(200, rollouts.state.model_dump())
            return
        if ex.method == "DELETE":
            if not rollouts.running:
                ex.respond(
                    409, error_body("no rollout is running", "invalid_request_error", "none")
                )
                return
            rollouts.abort()
            await rollouts.wait(10)
            assert rollouts.state is not None
            ex.respond_json(200, rollouts.state.model_dump())
            return
        try:
            req = orjson.loads(ex.body or b"{}")
            if not isinstance(req, dict) or not isinstance(req.get("candidate"), str):
                raise BadRequest('expected {"candidate": GROUP, "steps": [5, 25, 50, 100]}')
            steps = _steps(req.get("steps"))
            state = rollouts.start(req["candidate"], steps, self.gw.pools, self.gw.cfg.canary)
        except (orjson.JSONDecodeError, BadRequest, ServetuneError) as exc:
            msg = getattr(exc, "message", None) or str(exc)
            ex.respond(
                400 if not isinstance(exc, ConfigError) else 409,
                error_body(msg, "invalid_request_error", "rollout_refused"),
            )
            return
        ex.respond_json(202, state.model_dump())

    async def weights(self, ex: Exchange) -> None:
        if not self._is_admin(ex):
            return
        router = self.gw.router
        try:
            req = orjson.loads(ex.body or b"{}")
            weights = req.get("weights") if isinstance(req, dict) else None
            if not isinstance(weights, dict) or not all(
                isinstance(v, int | float) and v >= 0 for v in weights.values()
            ):
                raise BadRequest('expected {"weights": {"GROUP": number >= 0, ...}}')
            unknown = set(weights) - set(self.gw.pools)
            if unknown:
                raise BadRequest(f"unknown groups {sorted(unknown)}")
            new = {**router.weights, **{k: float(v) for k, v in weights.items()}}
            if not any(v > 0 for v in new.values()):
                raise BadRequest("at least one group needs a weight > 0")
        except (orjson.JSONDecodeError, BadRequest) as exc:
            ex.respond(
                400, error_body(getattr(exc, "message", str(exc)), "invalid_request_error", None)
            )
            return
        if self.gw.rollouts.running:
            ex.respond(
                409,
                error_body("a rollout is running: abort it first", "invalid_request_error", None),
            )
            return
        await self.gw.rollouts.operator_weights(new)
        ex.respond_json(200, {"weights": new})

    async def reload(self, ex: Exchange) -> None:
        if not self._is_admin(ex):
            return
        ok = await self.gw.reload()
        ex.respond_json(200 if ok else 409, {"reloaded": ok, "config": self.gw.config_id})
