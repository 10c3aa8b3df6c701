"""Weighted fair queueing of waiting requests across tenants, by tokens, with priority classes.

When every upstream is at its admission limit, requests wait here. The next one sent is

1. from the highest priority class that has anyone waiting (strict priority), and
2. inside that class, the oldest request of the tenant with the smallest *virtual token
   counter* — the tokens it has been served, divided by its weight (the Virtual Token Counter
   of Sheng et al., "Fairness in Serving Large Language Models", OSDI 2024)::

       counter[t] += (input + output_weight × max_tokens) / weight[t]      at dispatch
       counter[t] += (used − reserved) / weight[t]                          at settlement

   A tenant that starts waiting after being idle is lifted to the smallest counter among those
   already waiting (or to the counter of the last request sent when nobody waits), so idle time
   is not banked as credit and cannot be spent in a burst that starves the others.

So a tenant sending one huge request after another gets its weight's share of *tokens*, not of
requests, and a light tenant's requests pass the heavy tenant's queue. Each waiter has a
deadline; the pool answers 429 when it passes (see :mod:`servetune.gateway.pool`).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any


class Waiter:
    """One waiting request. ``fut`` resolves to the upstream it may use."""

    __slots__ = ("cost", "fut", "priority", "tenant", "weight")

    def __init__(self, tenant: str, weight: float, priority: int, cost: float) -> None:
        self.tenant = tenant
        self.weight = weight
        self.priority = priority
        self.cost = cost
        self.fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()


class FairQueue:
    """Waiting requests by priority class, then by the tenants' virtual token counters."""

    def __init__(self, classes: int) -> None:
        self._classes: list[dict[str, deque[Waiter]]] = [{} for _ in range(max(1, classes))]
        self.counters: dict[str, float] = {}
        self._vtime = 0.0
        self._len = 0
        self._per_tenant: dict[str, int] = {}

    def __len__(self) -> int:
        return self._len

    def waiting(self, tenant: str) -> int:
        return self._per_tenant.get(tenant, 0)

    def head_class(self) -> int:
        """The highest priority class (lowest index) with anyone waiting; the number of
        classes when nobody waits."""
        for i, cls in enumerate(self._classes):
            if cls:
                return i
        return len(self._classes)

    def push(self, w: Waiter) -> None:
        cls = self._classes[min(w.priority, len(self._classes) - 1)]
        q = cls.get(w.tenant)
        if q is None:
            floor = min((self.counters[t] for t in cls), default=self._vtime)
            if self.counters.get(w.tenant, floor) < floor:
                self.counters[w.tenant] = floor
            else:
                self.counters.setdefault(w.tenant, floor)
            q = cls[w.tenant] = deque()
        q.append(w)
        self._len += 1
        self._per_tenant[w.tenant] = self._per_tenant.get(w.tenant, 0) + 1

    def pop(self, held_back: Callable[[str], bool] | None = None) -> Waiter | None:
        """The next request to send, charged to its tenant's counter; None when empty (or
        when every tenant of the highest class waiting is ``held_back``: strict priority)."""
        for cls in self._classes:
            if not cls:
                continue
            counters = self.counters
            if held_back is None:
                tenant = min(cls, key=counters.__getitem__)
            else:
                free = [t for t in cls if not held_back(t)]
                if not free:
                    return None
                tenant = min(free, key=counters.__getitem__)
            q = cls[tenant]
            w = q.popleft()
            if not q:
                del cls[tenant]
            self._vtime = counters[tenant]
            counters[tenant] += w.cost / w.weight
            self._drop(w)
            return w
        return None

    def remove(self, w: Waiter) -> bool:
        """Take out a waiter that gave up (deadline, client gone); False if not queued."""
        cls = self._classes[min(w.priority, len(self._classes) - 1)]
        q = cls.get(w.tenant)
        if q is None:
            return False
        try:
            q.remove(w)
        except ValueError:
            return False
        if not q:
            del cls[w.tenant]
        self._drop(w)
        return True

    def _drop(self, w: Waiter) -> None:
        self._len -= 1
        n = self._per_tenant[w.tenant] - 1
        if n:
            self._per_tenant[w.tenant] = n
        else:
            del self._per_tenant[w.tenant]

    def charge(self, tenant: str, weight: float, tokens: float) -> None:
        """Count tokens sent without waiting (the queue was empty) or a settlement's
        difference; a tenant never waiting still has a counter, so it cannot bank credit."""
        c = self.counters.get(tenant)
        if c is None:
            c = self._vtime
        self.counters[tenant] = c + tokens / weight
