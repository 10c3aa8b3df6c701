"""Per-tenant admission: concurrency, request and token buckets, reserved before dispatch.

The buckets (one per tenant and limit) hold at most one minute's allowance and refill
continuously::

    level(t) = min(cap, level(t0) + (t − t0) × cap / 60)        cap = rpm or tpm

At admission a request takes 1 from the rpm bucket and ``input + max_tokens`` from the tpm
bucket — all three checks (concurrency, rpm, tpm) pass or nothing is taken — so however many
requests arrive at once, the tokens they *may* use never exceed the quota. When the request
ends its reservation is *settled*: the part it did not use is given back (the level may go
below zero if a request used more than reserved, e.g. an input estimate that was low; the
debt is repaid by the refill). A refused request is told when the bucket will hold enough
(``retry_after_s``). A request larger than the whole tpm cap can never pass: it is refused
as such, not asked to retry.

Two implementations share this contract: :class:`MemoryQuota` (one process; the event loop
makes each call atomic) and :class:`~servetune.gateway.redis_state.RedisQuota` (replicas
share every counter through atomic server-side scripts).
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

RefuseReason = Literal["concurrency", "rpm", "tpm", "tpm_too_large", "state_unavailable"]


@dataclass(frozen=True)
class Limits:
    """The three numbers a quota store enforces (0 = unlimited)."""

    max_concurrency: int = 0
    rpm: int = 0
    tpm: int = 0

    @property
    def unlimited(self) -> bool:
        return not (self.max_concurrency or self.rpm or self.tpm)


@dataclass
class Reservation:
    tenant: str
    tokens: int
    """Reserved from the tpm bucket (0 when the tenant has no tpm limit)."""
    lease: str
    """Id of the concurrency slot ('' when the tenant has no concurrency cap)."""
    tpm: int
    settled: bool = False


@dataclass(frozen=True)
class Refusal:
    reason: RefuseReason
    retry_after_s: float | None
    message: str


class QuotaStore(Protocol):
    """Where counters live: this process, or Redis shared by replicas."""

    name: str

    async def reserve(self, tenant: str, limits: Limits, tokens: int) -> Reservation | Refusal:
        """Take a concurrency slot, one request and ``tokens`` tokens — all or nothing."""
        ...

    async def settle(self, res: Reservation, used_tokens: int | None) -> None:
        """Release the slot; give back ``tokens − used`` (None: keep the whole reservation)."""
        ...

    async def live_replicas(self) -> int:
        """Gateway replicas sharing this store (1 in memory)."""
        ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...


def refill(level: float, last: float, now: float, cap: int) -> float:
    """The bucket's level at ``now`` (continuous refill of ``cap`` per minute, capped)."""
    if now > last:
        level += (now - last) * cap / 60.0
    return level if level < cap else float(cap)


def wait_for(level: float, need: float, cap: int) -> float:
    """Seconds until a bucket at ``level`` holds ``need``."""
    return max(0.0, (need - level) * 60.0 / cap)


def too_large(tokens: int, tpm: int) -> Refusal:
    return Refusal(
        "tpm_too_large",
        None,
        f"this request reserves {tokens} tokens (prompt + max_tokens), more than the "
        f"whole quota of {tpm} tokens per minute; lower max_tokens or shorten the prompt",
    )


_ids = itertools.count(1)
_REPLICA = f"{os.getpid():x}"


_LOCAL_SLOT = "local"


def new_lease_id() -> str:
    return f"{_REPLICA}-{next(_ids):x}"


class MemoryQuota:
    """Counters in this process. Exact for one gateway; replicas need :class:`RedisQuota`."""

    name = "memory"

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._now = clock
        self._buckets: dict[tuple[str, str], list[float]] = {}
        self._inflight: dict[str, int] = {}

    def _level(self, tenant: str, kind: str, cap: int, now: float) -> list[float]:
        b = self._buckets.get((tenant, kind))
        if b is None:
            b = self._buckets[(tenant, kind)] = [float(cap), now]
        else:
            b[0] = refill(b[0], b[1], now, cap)
            b[1] = now
        return b

    def at_limit(self, tenant: str, limits: Limits) -> Refusal | None:
        """The refusal a request of ``tenant`` gets whatever its size — its concurrency or its
        request rate is used up — or None. Takes nothing: the gateway asks it before reading
        a body, so a flooding tenant's refusals cost no parsing or counting."""
        if limits.max_concurrency and self._inflight.get(tenant, 0) >= limits.max_concurrency:
            return Refusal(
                "concurrency",
                None,
                f"too many requests at once: this key's limit is {limits.max_concurrency} "
                "concurrent requests",
            )
        if limits.rpm:
            rb = self._level(tenant, "rpm", limits.rpm, self._now())
            if rb[0] < 1.0:
                return Refusal(
                    "rpm",
                    wait_for(rb[0], 1.0, limits.rpm),
                    f"rate limit: {limits.rpm} requests per minute",
                )
        return None

    def reserve_now(
        self, tenant: str, limits: Limits, tokens: int, checked: bool = False
    ) -> Reservation | Refusal:
        """Synchronous form (one event loop: nothing can interleave). ``checked``: the caller
        has just asked :meth:`at_limit`, in the same callback, and got None."""
        if not checked:
            refused = self.at_limit(tenant, limits)
            if refused is not None:
                return refused
        now = self._now()
        rb = tb = None
        if limits.rpm:
            rb = self._level(tenant, "rpm", limits.rpm, now)
        if limits.tpm:
            if tokens > limits.tpm:
                return too_large(tokens, limits.tpm)
            tb = self._level(tenant, "tpm", limits.tpm, now)
            if tb[0] < tokens:
                return Refusal(
                    "tpm",
                    wait_for(tb[0], tokens, limits.tpm),
                    f"token quota: {limits.tpm} tokens per minute; this request reserves "
                    f"{tokens} (prompt + max_tokens)",
                )
        if rb is not None:
            rb[0] -= 1.0
        if tb is not None:
            tb[0] -= tokens
        lease = ""
        if limits.max_concurrency:
            self._inflight[tenant] = self._inflight.get(tenant, 0) + 1
            lease = _LOCAL_SLOT  # one process: the count is the slot, no id to keep
        return Reservation(tenant, tokens if limits.tpm else 0, lease, limits.tpm)

    async def reserve(self, tenant: str, limits: Limits, tokens: int) -> Reservation | Refusal:
        return self.reserve_now(tenant, limits, tokens)

    def settle_now(self, res: Reservation, used_tokens: int | None) -> None:
        if res.settled:
            return
        res.settled = True
        if res.lease:
            n = self._inflight.get(res.tenant, 0) - 1
            if n > 0:
                self._inflight[res.tenant] = n
            else:
                self._inflight.pop(res.tenant, None)
        if res.tpm and used_tokens is not None and used_tokens != res.tokens:
            now = self._now()
            b = self._level(res.tenant, "tpm", res.tpm, now)
            b[0] = min(float(res.tpm), b[0] + (res.tokens - used_tokens))

    async def settle(self, res: Reservation, used_tokens: int | None) -> None:
        self.settle_now(res, used_tokens)

    def inflight(self, tenant: str) -> int:
        return self._inflight.get(tenant, 0)

    async def live_replicas(self) -> int:
        return 1

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None
