"""Quota counters and canary state shared by gateway replicas in Redis — exactly.

Every check-and-take is one server-side Lua script, so two replicas can never both take the
last token (LiteLLM #2730: three replicas let 30 requests through rpm=10, because each read,
compared and wrote on its own). The scripts read the time from Redis (``TIME``), so replicas'
clocks do not matter. Keys of one tenant share a hash tag (``{t:NAME}``) and so a cluster slot.

- ``…{t:NAME}:rpm`` / ``:tpm`` — hash ``l`` (level), ``t`` (time of ``l``): the token bucket
  of :mod:`servetune.gateway.quota`. A missing key is a full bucket; a key expires once it
  would have refilled.
- ``…{t:NAME}:conc`` — sorted set of concurrency *leases*, scored by their expiry. Each
  replica renews its own leases every ``lease_s / 3``; a dead replica stops renewing, so its
  slots free themselves within ``lease_s`` (expired members are dropped before each count).
  The tokens it reserved stay spent: nobody can tell what its requests used, and the full
  reservation is the upper bound.
- ``…{t:NAME}:epoch`` — hash ``lost``: when Redis lost the tenant's state (0: never). A
  missing bucket is full; after a Redis restart without persistence (every key gone) a
  replica that had seen the tenant starts its buckets empty and refilling from that moment —
  a lost minute's use is not handed out again (before: 1.30× the bound in the minute after a
  restart).
- ``…replicas`` — sorted set of live replicas (same lease rule): upstream admission limits
  are shared between them.
- ``…weights`` — hash group → weight; ``…rollout`` — the rollout's state (JSON);
  ``…obs:<id>`` — canary observations pushed by every replica (a list, trimmed).

Redis unreachable: admission fails closed (503 with the reason), never unmetered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections import defaultdict
from typing import Any

from servetune.aio import cancel_requested, stop_task
from servetune.errors import ConfigError
from servetune.gateway.quota import Limits, Refusal, Reservation, new_lease_id, too_large

log = logging.getLogger(__name__)

# A missing bucket is full — unless Redis lost its data since this replica last saw the
# tenant (a restart without persistence): then nobody knows what was used in the last minute,
# and the tenant's buckets refill from empty since the loss. The tenant's epoch hash (same
# hash tag, never expiring) holds that moment: 0 when made on a first sight, the time of the
# loss when a replica that had seen it finds it gone (``seen``: ARGV from the replica).
_MISSING = """
local function lost_at(now, seen)
  local v = redis.call('HGET', KEYS[4], 'lost')
  if v then return tonumber(v) end
  local at = 0
  if seen then at = now end
  redis.call('HSET', KEYS[4], 'lost', tostring(at))
  return at
end
local function missing(cap, now, seen)
  local l = (now - lost_at(now, seen)) * cap / 60
  if l > cap then l = cap end
  return l
end
"""

# KEYS: rpm, tpm, conc, epoch   ARGV: rpm, tpm, max_conc, tokens, lease_id, lease_ms, seen
_RESERVE = (
    _MISSING
    + """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local rpm = tonumber(ARGV[1]); local tpm = tonumber(ARGV[2]); local maxc = tonumber(ARGV[3])
local need = tonumber(ARGV[4]); local lease_ms = tonumber(ARGV[6]); local seen = ARGV[7] == '1'
if maxc > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now * 1000)
  if redis.call('ZCARD', KEYS[3]) >= maxc then return {'concurrency', '-1'} end
end
local function level(key, cap)
  local v = redis.call('HMGET', key, 'l', 't')
  local l = tonumber(v[1]); local t0 = tonumber(v[2])
  if l == nil or t0 == nil then return missing(cap, now, seen) end
  if now > t0 then l = l + (now - t0) * cap / 60 end
  if l > cap then l = cap end
  return l
end
local rl = 0; local tl = 0
if rpm > 0 then
  rl = level(KEYS[1], rpm)
  if rl < 1 then return {'rpm', tostring((1 - rl) * 60 / rpm)} end
end
if tpm > 0 then
  tl = level(KEYS[2], tpm)
  if tl < need then return {'tpm', tostring((need - tl) * 60 / tpm)} end
end
if rpm > 0 then
  rl = rl - 1
  redis.call('HSET', KEYS[1], 'l', tostring(rl), 't', tostring(now))
  redis.call('PEXPIRE', KEYS[1], math.ceil((rpm - rl) * 60000 / rpm) + 1000)
end
if tpm > 0 then
  tl = tl - need
  redis.call('HSET', KEYS[2], 'l', tostring(tl), 't', tostring(now))
  redis.call('PEXPIRE', KEYS[2], math.ceil((tpm - tl) * 60000 / tpm) + 1000)
end
if maxc > 0 then
  redis.call('ZADD', KEYS[3], now * 1000 + lease_ms, ARGV[5])
  redis.call('PEXPIRE', KEYS[3], lease_ms + 1000)
end
return {'ok', '0'}
"""
)

# KEYS: tpm, conc, (unused), epoch   ARGV: tpm, give_back, lease_id, seen
_SETTLE = (
    _MISSING
    + """
local tpm = tonumber(ARGV[1]); local back = tonumber(ARGV[2])
if ARGV[3] ~= '' then redis.call('ZREM', KEYS[2], ARGV[3]) end
if tpm > 0 and back ~= 0 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
  local v = redis.call('HMGET', KEYS[1], 'l', 't')
  local l = tonumber(v[1]); local t0 = tonumber(v[2])
  if l == nil or t0 == nil then l = missing(tpm, now, ARGV[4] == '1'); t0 = now end
  if now > t0 then l = l + (now - t0) * tpm / 60 end
  if l > tpm then l = tpm end
  l = l + back
  if l > tpm then l = tpm end
  redis.call('HSET', KEYS[1], 'l', tostring(l), 't', tostring(now))
  redis.call('PEXPIRE', KEYS[1], math.ceil((tpm - l) * 60000 / tpm) + 1000)
end
return 1
"""
)

# KEYS: one sorted set   ARGV: lease_ms, member...   (renews members that still exist)
_RENEW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local lease_ms = tonumber(ARGV[1])
for i = 2, #ARGV do redis.call('ZADD', KEYS[1], 'XX', now + lease_ms, ARGV[i]) end
redis.call('PEXPIRE', KEYS[1], lease_ms + 1000)
return 1
"""

# KEYS: replicas   ARGV: lease_ms, replica_id   → live replicas (self included)
_HEARTBEAT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[1]), ARGV[2])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[1]) + 1000)
return redis.call('ZCARD', KEYS[1])
"""

# KEYS: lock   ARGV: owner, ms   → 1 when held by owner (taken or extended), else 0
_LOCK = """
local cur = redis.call('GET', KEYS[1])
if cur == false or cur == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', tonumber(ARGV[2]))
  return 1
end
return 0
"""

# KEYS: lock   ARGV: owner   → 1 when it was the owner's and is gone now
_UNLOCK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def _text(v: bytes | str) -> str:
    return v.decode() if isinstance(v, bytes) else v


def replica_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{os.urandom(3).hex()}"


class RedisState:
    """Quota store and shared canary state on one Redis (see the module docstring)."""

    name = "redis"

    def __init__(self, url: str, prefix: str = "servetune:gw:", lease_s: float = 15.0) -> None:
        try:
            import redis.asyncio as aioredis
        except ImportError as exc:  # pragma: no cover - a dependency of servetune
            raise ConfigError.over_fields("{redis} needs the 'redis' Python package") from exc
        self.url = url
        self.prefix = prefix
        self.lease_ms = int(lease_s * 1000)
        self.replica = replica_id()
        try:
            self._r = aioredis.Redis.from_url(
                url, socket_connect_timeout=2.0, socket_timeout=5.0, health_check_interval=10
            )
        except ValueError as exc:
            raise ConfigError.over_fields(f"{{redis}} {url!r}: {exc}") from None
        self._reserve = self._r.register_script(_RESERVE)
        self._settle = self._r.register_script(_SETTLE)
        self._renew = self._r.register_script(_RENEW)
        self._heartbeat = self._r.register_script(_HEARTBEAT)
        self._lock = self._r.register_script(_LOCK)
        self._unlock = self._r.register_script(_UNLOCK)
        self._leases: dict[str, set[str]] = defaultdict(set)
        """conc key → this replica's live leases (renewed by the heartbeat)."""
        self._replicas = 1
        self._task: asyncio.Task[None] | None = None
        self._seen: set[str] = set()
        """Tenants whose state this replica has seen in Redis (their state missing later
        means Redis lost it)."""
        self.available = True
        """Redis answered the last call (False: admission fails closed; ``/health`` says so)."""

    # -- keys --------------------------------------------------------------------------------
    def _tkey(self, tenant: str, kind: str) -> str:
        return f"{self.prefix}{{t:{tenant}}}:{kind}"

    def key(self, name: str) -> str:
        return self.prefix + name

    @property
    def client(self) -> Any:
        return self._r

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        try:
            await self._r.ping()
        except Exception as exc:
            raise ConfigError.over_fields(
                f"cannot reach Redis at {self.url}: {exc}",
                hint="start redis-server or fix {redis} (redis://host:port/db)",
            ) from None
        await self._beat()
        self._task = asyncio.create_task(self._loop(), name="servetune-gateway-leases")

    async def close(self) -> None:
        if self._task is not None:
            if not await stop_task(self._task):
                log.warning("gateway: the Redis lease task did not stop within 5 s")
            self._task = None
        with contextlib.suppress(Exception):
            await self._r.zrem(self.key("replicas"), self.replica)
        with contextlib.suppress(Exception):
            await self._r.aclose()

    async def _loop(self) -> None:
        period = self.lease_ms / 3000.0
        while not cancel_requested():
            await asyncio.sleep(period)
            try:
                await self._beat()
            except Exception as exc:  # Redis away for a while: keep trying, say so once
                if cancel_requested():
                    return  # a cancellation that came out as an error: stop
                self.available = False
                log.warning("gateway: cannot renew leases in Redis: %s", exc)

    async def _beat(self) -> None:
        n = await self._heartbeat(keys=[self.key("replicas")], args=[self.lease_ms, self.replica])
        self.available = True
        self._replicas = max(1, int(n))
        for ckey, leases in list(self._leases.items()):
            if leases:
                await self._renew(keys=[ckey], args=[self.lease_ms, *leases])
            else:
                self._leases.pop(ckey, None)

    async def live_replicas(self) -> int:
        return self._replicas

    # -- quota -------------------------------------------------------------------------------
    async def reserve(self, tenant: str, limits: Limits, tokens: int) -> Reservation | Refusal:
        if limits.tpm and tokens > limits.tpm:
            return too_large(tokens, limits.tpm)
        lease = new_lease_id() + ":" + self.replica if limits.max_concurrency else ""
        ckey = self._tkey(tenant, "conc")
        try:
            res = await self._reserve(
                keys=[
                    self._tkey(tenant, "rpm"),
                    self._tkey(tenant, "tpm"),
                    ckey,
                    self._tkey(tenant, "epoch"),
                ],
                args=[
                    limits.rpm,
                    limits.tpm,
                    limits.max_concurrency,
                    tokens,
                    lease,
                    self.lease_ms,
                    "1" if tenant in self._seen else "0",
                ],
            )
        except Exception as exc:
            self.available = False
            return Refusal("state_unavailable", 1.0, f"the gateway's shared state is down: {exc}")
        self.available = True
        self._seen.add(tenant)
        verdict = res[0].decode() if isinstance(res[0], bytes) else str(res[0])
        if verdict == "ok":
            if lease:
                self._leases[ckey].add(lease)
            return Reservation(tenant, tokens if limits.tpm else 0, lease, limits.tpm)
        wait = float(res[1])
        if verdict == "concurrency":
            return Refusal(
                "concurrency",
                None,
                f"too many requests at once: this key's limit is {limits.max_concurrency} "
                "concurrent requests",
            )
        if verdict == "rpm":
            return Refusal("rpm", wait, f"rate limit: {limits.rpm} requests per minute")
        return Refusal(
            "tpm",
            wait,
            f"token quota: {limits.tpm} tokens per minute; this request reserves {tokens} "
            "(prompt + max_tokens)",
        )

    async def settle(self, res: Reservation, used_tokens: int | None) -> None:
        if res.settled:
            return
        res.settled = True
        back = 0 if used_tokens is None or not res.tpm else res.tokens - used_tokens
        if not res.lease and not back:
            return
        ckey = self._tkey(res.tenant, "conc")
        if res.lease:
            self._leases[ckey].discard(res.lease)
        try:
            await self._settle(
                keys=[self._tkey(res.tenant, "tpm"), ckey, ckey, self._tkey(res.tenant, "epoch")],
                args=[res.tpm, back, res.lease, "1" if res.tenant in self._seen else "0"],
            )
        except Exception as exc:  # the lease expires by itself; the tokens stay spent
            log.warning("gateway: settling a reservation in Redis failed: %s", exc)

    # -- shared canary state -----------------------------------------------------------------
    async def get_weights(self) -> dict[str, float] | None:
        raw = await self._r.hgetall(self.key("weights"))
        if not raw:
            return None
        return {_text(k): float(v) for k, v in raw.items()}

    async def set_weights(self, weights: dict[str, float]) -> None:
        key = self.key("weights")
        async with self._r.pipeline(transaction=True) as p:
            p.delete(key)
            p.hset(key, mapping={k: repr(float(v)) for k, v in weights.items()})
            await p.execute()

    async def get_json(self, name: str) -> bytes | None:
        value = await self._r.get(self.key(name))
        return value if isinstance(value, bytes) else None

    async def set_json(self, name: str, body: bytes) -> None:
        await self._r.set(self.key(name), body)

    async def hold_lock(self, name: str, owner: str, ms: int) -> bool:
        return bool(await self._lock(keys=[self.key(name)], args=[owner, ms]))

    async def release_lock(self, name: str, owner: str) -> bool:
        """Give the lock up if ``owner`` holds it (another owner's lock stays)."""
        return bool(await self._unlock(keys=[self.key(name)], args=[owner]))

    async def push_observations(self, rollout_id: str, lines: list[bytes]) -> None:
        key = self.key(f"obs:{rollout_id}")
        async with self._r.pipeline(transaction=False) as p:
            p.rpush(key, *lines)
            p.ltrim(key, -200_000, -1)
            p.expire(key, 86_400)
            await p.execute()

    async def read_observations(self, rollout_id: str, start: int) -> list[bytes]:
        out = await self._r.lrange(self.key(f"obs:{rollout_id}"), start, -1)
        return [x if isinstance(x, bytes) else x.encode() for x in out]
