"""Fair share of a group's slots among its active tenants, without per-tenant caps.

Fair queueing orders the requests that *wait*; it cannot take back a slot. A tenant flooding at
equal priority and without a concurrency cap of its own holds every slot of the group, so a
light tenant's request always waits for one of the flood's to end — a whole request's time at
worst (its P99 TTFT was 7.6× its figure alone under a 10× flood). The share rule keeps a slot
ready for it instead, and gives the slot back as soon as nobody needs it (work-conserving):

- a tenant is *active* while it holds a slot or sent a request within ``window_s``;
- each active tenant's *share* is the group's slots × its weight ÷ the active tenants' weights;
- a tenant below its share may take any free slot (ahead of waiting tenants above theirs);
- a tenant at or above its share may take a free slot only if that leaves, for each *other*
  active tenant below its share, ``ahead`` slots free (``queue.fair_share_ahead``, default 2;
  never more than that tenant's share minus what it holds), so an idle share costs the others
  at most ``ahead`` slots per active tenant, and none once the light tenant has been quiet for
  ``window_s``;
- a tenant below its share that finds no free slot (its kept ones in use, a burst of its own)
  may take up to ``burst`` slots over an upstream's limit (``queue.fair_share_burst``, default
  1; 0: never) rather than wait for another tenant's request to end: a Poisson tenant using
  half a slot on average has 3 requests running 1.4 % of the time, which no fair reservation
  short of all the slots covers without idling them.

With one active tenant nothing is held back. What is held back shows as the flood's wait in the
queue (``queue_seconds{tenant}``), never as a refusal of its own.
"""

from __future__ import annotations

import math


class TenantShares:
    __slots__ = ("ahead", "burst", "held", "seen", "weights", "window_s")

    def __init__(self, window_s: float, ahead: int = 1, burst: int = 0) -> None:
        self.window_s = window_s
        self.ahead = ahead
        """Slots kept free for each active tenant below its share, at most its share minus
        what it holds."""
        """How long a tenant stays active after its last request (0: the rule is off)."""
        self.burst = burst
        """Slots over an upstream's limit a tenant below its share may take when none is
        free to it."""
        self.held: dict[str, int] = {}
        """Slots each tenant holds in the group."""
        self.seen: dict[str, float] = {}
        """Each tenant's last request (loop time, seconds)."""
        self.weights: dict[str, float] = {}

    def arrived(self, tenant: str, weight: float, now: float) -> None:
        if self.window_s:
            self.seen[tenant] = now
            self.weights[tenant] = weight

    def took(self, tenant: str) -> None:
        self.held[tenant] = self.held.get(tenant, 0) + 1

    def gave(self, tenant: str) -> None:
        n = self.held.get(tenant, 0) - 1
        if n > 0:
            self.held[tenant] = n
        else:
            self.held.pop(tenant, None)

    def _active(self, now: float) -> dict[str, float]:
        """Active tenants and their weights (tenants quiet for the window are forgotten)."""
        horizon = now - self.window_s
        held, weights = self.held, self.weights
        stale = [t for t, at in self.seen.items() if at < horizon and t not in held]
        for t in stale:
            del self.seen[t]
            weights.pop(t, None)
        return {t: weights.get(t, 1.0) for t in self.seen}

    def under_share(self, tenant: str, capacity: float, now: float) -> bool:
        """Does ``tenant`` hold less than its share (and is there anyone to share with)?"""
        if not self.window_s or not math.isfinite(capacity) or len(self.seen) < 2:
            return False
        active = self._active(now)
        if len(active) < 2 or tenant not in active:
            return False
        total = sum(active.values())
        return self.held.get(tenant, 0) < capacity * active[tenant] / total

    def blocked(self, tenant: str, free: float, capacity: float, now: float) -> bool:
        """May ``tenant`` not take one of the ``free`` slots (it is at or above its share and
        that slot is the one kept for another active tenant below its share)?"""
        if not self.window_s or free > len(self.seen) * self.ahead or not math.isfinite(capacity):
            return False  # more free slots than could be kept: nothing can be short
        active = self._active(now)
        if len(active) < 2:
            return False
        total = sum(active.values())
        held = self.held
        if tenant in active and held.get(tenant, 0) < capacity * active[tenant] / total:
            return False
        kept = 0
        for t, w in active.items():
            if t != tenant:
                missing = capacity * w / total - held.get(t, 0)
                if missing > 0:
                    kept += min(self.ahead, math.ceil(missing))
        return free - 1 < kept
