"""A circuit breaker per upstream: stop sending to an upstream that keeps failing.

closed ─(``failures`` failures in a row)→ open ─(``cooldown_s``)→ half-open
half-open: one request is let through; its success closes the circuit, its failure opens it
again for another cooldown. A failure is an upstream that cannot be reached, drops the
connection before answering, times out before its first byte, or answers 5xx; 4xx answers
(the client's fault) are successes for the breaker.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

State = Literal["closed", "open", "half_open"]


class Breaker:
    def __init__(
        self,
        failures: int = 5,
        cooldown_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.threshold = failures
        self.cooldown_s = cooldown_s
        self._clock = clock
        self.state: State = "closed"
        self.failures = 0
        self.opened_at = 0.0
        self._probing = False
        self.opened_total = 0

    def allows(self) -> bool:
        """May a request be sent now? (Taking the half-open probe counts as sending.)"""
        if self.state == "closed":
            return True
        if self.state == "open":
            if self._clock() - self.opened_at < self.cooldown_s:
                return False
            self.state = "half_open"
            self._probing = False
        if self._probing:
            return False
        self._probing = True
        return True

    def would_allow(self) -> bool:
        """Like :meth:`allows` without taking the probe."""
        if self.state == "closed":
            return True
        if self.state == "open":
            return self._clock() - self.opened_at >= self.cooldown_s
        return not self._probing

    def retry_after_s(self) -> float:
        if self.state != "open":
            return 0.0
        return max(0.0, self.cooldown_s - (self._clock() - self.opened_at))

    def success(self) -> None:
        self.failures = 0
        self._probing = False
        self.state = "closed"

    def neutral(self) -> None:
        """The request ended without telling (the client left first): free the probe."""
        self._probing = False

    def failure(self) -> None:
        self.failures += 1
        self._probing = False
        if self.state == "half_open" or self.failures >= self.threshold:
            if self.state != "open":
                self.opened_total += 1
            self.state = "open"
            self.opened_at = self._clock()
