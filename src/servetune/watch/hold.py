"""The hold time of a live finding — one definition for `servetune watch` and the Prometheus
alerting rules of `servetune export prometheus-rules`.

A rule evaluated over a sliding window flickers where its condition sits near a threshold
(a server near capacity, a KV pool at 90%). A finding therefore

- *starts* once its condition has held at every evaluation for ``hold_s`` (Prometheus'
  ``for:``; the alert is *pending* meanwhile), and
- *stops* once its condition has been absent at every evaluation for ``hold_s`` (Prometheus'
  ``keep_firing_for:``, Prometheus ≥ 2.42).

``hold_s = 0`` gives the bare rule: a finding starts on the first evaluation that shows it and
stops on the first that does not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar

HOLD_S = 60.0
"""The default hold time, seconds: `servetune watch --for` and `export prometheus-rules --for`."""

T = TypeVar("T")


@dataclass(frozen=True)
class Change(Generic[T]):
    """A finding that starts or stops at ``t``; ``since``: when its condition began to hold
    (a start) or last held (a stop)."""

    event: Literal["start", "stop"]
    key: str
    t: float
    since: float
    item: T


@dataclass
class Hold(Generic[T]):
    """Start/stop hysteresis over a series of evaluations (``update`` at each one)."""

    hold_s: float = HOLD_S
    pending: dict[str, float] = field(default_factory=dict)
    """Key → time its condition began to hold (not yet active)."""
    active: dict[str, T] = field(default_factory=dict)
    last_seen: dict[str, float] = field(default_factory=dict)
    """Key → the last evaluation that showed it."""
    onset: dict[str, float] = field(default_factory=dict)
    """Active key → when its condition began to hold."""

    def update(self, t: float, current: dict[str, T]) -> list[Change[T]]:
        """The evaluation at T showed CURRENT (key → its latest item): the changes it makes."""
        out: list[Change[T]] = []
        for key, item in current.items():
            self.last_seen[key] = t
            if key in self.active:
                self.active[key] = item
                continue
            since = self.pending.setdefault(key, t)
            if t - since >= self.hold_s:
                del self.pending[key]
                self.active[key] = item
                self.onset[key] = since
                out.append(Change("start", key, t, since, item))
        for key in [k for k in self.pending if k not in current]:
            del self.pending[key]  # a gap resets a pending finding, as Prometheus' `for:`
        for key in [k for k in self.active if k not in current]:
            last = self.last_seen[key]
            if t - last >= self.hold_s:
                item = self.active.pop(key)
                self.onset.pop(key, None)
                out.append(Change("stop", key, t, last, item))
        return out
