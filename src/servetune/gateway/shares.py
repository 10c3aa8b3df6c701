"""Fair share of a group's slots among its active tenants, without per-tenant caps.

Fair queueing orders the requests that *wait*; it cannot take back a slot. A tenant flooding at
equal priority and without a concurrency cap of its own holds every slot of the group, so a
light tenant's request always waits for one of the flood's to end (its P99 TTFT 4–13× its
figure alone under a 10× flood). The share rule keeps room for the light tenant's next
requests instead — sized to what it needs, never more than its share, and given back as soon
as it goes quiet (work-conserving):

- a tenant is *active* while it holds a slot or sent a request within ``window_s``;
- its *share* is the group's slots × its weight ÷ the active tenants' weights;
- its *need* is the ``quantile`` (0.99) of its concurrency: for arrivals at λ req/s each
  holding a slot S s, the number running is Poisson(λS) whatever the distribution of S (an
  M/G/∞ occupancy; the same sizing as ``queue.priority_headroom``), λ its request rate (an
  exponentially weighted count over ``window_s``), S its own mean slot time;
- its *reservation* is the smaller of its need and its share rounded down (and of ``cap``,
  ``queue.fair_share_ahead``, when set): slots it may take whoever waits;
- a tenant beyond its reservation may take a free slot only if that leaves, for each other
  active tenant, its reservation minus what it holds free (a freed slot goes to a waiting
  tenant within its reservation before fair queueing's order among the others);
- a tenant whose mean concurrency (λS) is below its share, with nothing waiting, that finds no
  slot free while it holds fewer than its need, may go up to ``burst`` over an upstream's
  admission limit (``queue.fair_share_burst``, default 1; 0: never) rather than wait for one of
  another tenant's requests to end: a Poisson tenant using half a slot on average (need 3) has
  3 running 1.4 % of the time, more than a share of 2 of 4 slots covers without idling a third.

With one active tenant nothing is held back, and a tenant quiet for ``window_s`` holds nothing
back. What is held back shows as the other tenants' wait in the queue (``queue_seconds``),
never as a refusal of its own. The cost is the flood's: the slots kept free while a light
tenant is active and has fewer running than its reservation.
"""

from __future__ import annotations

import math

MIN_RATE_SPAN_S = 1.0
"""The shortest time a rate is measured over (a tenant's first request is not a burst of
infinite rate)."""


def poisson_quantile(mean: float, q: float, upto: int) -> int:
    """The smallest k ≤ ``upto`` with P(Poisson(mean) ≤ k) ≥ q (``upto`` when none is)."""
    if mean <= 0.0:
        return 0
    p = math.exp(-mean)
    cdf = p
    k = 0
    while cdf < q and k < upto:
        k += 1
        p *= mean / k
        cdf += p
    return k


class TenantShares:
    __slots__ = (
        "_count",
        "_since",
        "burst",
        "cap",
        "held",
        "quantile",
        "seen",
        "service_s",
        "weights",
        "window_s",
    )

    def __init__(
        self, window_s: float, cap: int | None = None, burst: int = 0, quantile: float = 0.99
    ) -> None:
        self.window_s = window_s
        """How long a tenant stays active after its last request (0: the rule is off); also
        the time constant of its request rate."""
        self.cap = cap
        """The most slots kept for one tenant (None: its share rounded down)."""
        self.burst = burst
        """Slots over an upstream's limit a tenant below its share and its need may take when
        none is free to it."""
        self.quantile = quantile
        """The quantile of a tenant's concurrency its reservation covers."""
        self.held: dict[str, int] = {}
        """Slots each tenant holds in the group."""
        self.seen: dict[str, float] = {}
        """Each tenant's last request (loop time, seconds)."""
        self.weights: dict[str, float] = {}
        self._count: dict[str, float] = {}
        """Each active tenant's requests, exponentially weighted over ``window_s``, as of its
        last request."""
        self._since: dict[str, float] = {}
        """When each active tenant became active."""
        self.service_s: dict[str, float] = {}
        """Each tenant's mean slot time (an EWMA of its served requests)."""

    def arrived(self, tenant: str, weight: float, now: float) -> None:
        w = self.window_s
        if not w:
            return
        last = self.seen.get(tenant)
        if last is None:
            self._since[tenant] = now
            self._count[tenant] = 1.0
        else:
            self._count[tenant] = self._count[tenant] * math.exp((last - now) / w) + 1.0
        self.seen[tenant] = now
        self.weights[tenant] = weight

    def took(self, tenant: str) -> None:
        self.held[tenant] = self.held.get(tenant, 0) + 1

    def gave(self, tenant: str, service_s: float | None = None) -> None:
        n = self.held.get(tenant, 0) - 1
        if n > 0:
            self.held[tenant] = n
        else:
            self.held.pop(tenant, None)
        if service_s is not None:
            s = self.service_s.get(tenant)
            self.service_s[tenant] = service_s if s is None else s + 0.1 * (service_s - s)

    # -- what a tenant is entitled to ----------------------------------------------------------
    def _active(self, now: float) -> dict[str, float]:
        """Active tenants and their weights (tenants quiet for the window are forgotten)."""
        horizon = now - self.window_s
        held, seen = self.held, self.seen
        stale = [t for t, at in seen.items() if at < horizon and t not in held]
        for t in stale:
            del seen[t]
            self.weights.pop(t, None)
            self._count.pop(t, None)
            self._since.pop(t, None)
        weights = self.weights
        return {t: weights.get(t, 1.0) for t in seen}

    def mean(self, tenant: str, now: float, default_service_s: float) -> float:
        """The tenant's mean concurrency demand, λS (0 when it is not active)."""
        last = self.seen.get(tenant)
        if last is None:
            return 0.0
        w = self.window_s
        span = max(MIN_RATE_SPAN_S, now - self._since[tenant])
        # the weighted count of a steady rate λ after ``span`` is λ·w·(1 − e^(−span/w))
        rate = self._count[tenant] * math.exp((last - now) / w) / (w * -math.expm1(-span / w))
        return rate * self.service_s.get(tenant, default_service_s)

    def _reserve(self, tenant: str, share: float, now: float, service_s: float) -> int:
        top = math.floor(share + 1e-9)
        if self.cap is not None:
            top = min(top, self.cap)
        if top <= 0:
            return 0
        return poisson_quantile(self.mean(tenant, now, service_s), self.quantile, top)

    def reservation(self, tenant: str, capacity: float, now: float, service_s: float) -> int:
        """The slots ``tenant`` may take whoever waits (0: no one to share with)."""
        if not self.window_s or not math.isfinite(capacity) or len(self.seen) < 2:
            return 0
        active = self._active(now)
        if len(active) < 2 or tenant not in active:
            return 0
        share = capacity * active[tenant] / sum(active.values())
        return self._reserve(tenant, share, now, service_s)

    def within(self, tenant: str, capacity: float, now: float, service_s: float) -> bool:
        """Does ``tenant`` hold fewer slots than its reservation?"""
        held = self.held.get(tenant, 0)
        return held < self.reservation(tenant, capacity, now, service_s)

    def may_burst(self, tenant: str, capacity: float, now: float, service_s: float) -> bool:
        """May ``tenant`` go over an upstream's limit (its mean concurrency below its share,
        fewer running than its need)? The caller checks that none of its requests waits."""
        if not self.burst or not self.window_s or not math.isfinite(capacity):
            return False
        if len(self.seen) < 2:
            return False
        active = self._active(now)
        if len(active) < 2 or tenant not in active:
            return False
        share = capacity * active[tenant] / sum(active.values())
        m = self.mean(tenant, now, service_s)
        if m >= share:
            return False
        held = self.held.get(tenant, 0)
        need = poisson_quantile(m, self.quantile, held + 1)
        return held < need

    def blocked(
        self,
        tenant: str,
        free: float,
        capacity: float,
        now: float,
        service_s: float,
    ) -> bool:
        """May ``tenant`` not take one of the ``free`` slots (it is beyond its reservation and
        that slot is one kept for another active tenant within its own)?"""
        if not self.window_s or len(self.seen) < 2 or not math.isfinite(capacity):
            return False
        active = self._active(now)
        if len(active) < 2:
            return False
        total = sum(active.values())
        held = self.held
        if tenant in active:
            mine = self._reserve(tenant, capacity * active[tenant] / total, now, service_s)
            if held.get(tenant, 0) < mine:
                return False
        room = free - 1  # the free slots left if ``tenant`` takes one
        for t, w in active.items():
            if t == tenant:
                continue
            h = held.get(t, 0)
            if h >= capacity * w / total:
                continue  # at or over its share: nothing kept
            room -= max(0, self._reserve(t, capacity * w / total, now, service_s) - h)
            if room < 0:
                return True
        return False
