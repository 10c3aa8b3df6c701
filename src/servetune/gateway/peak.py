"""Declared peak hours, in which no rollout step starts (a rollback is never held back).

A window is ``[DAYS] HH:MM-HH:MM``: ``"Mon-Fri 09:00-18:00"``, ``"Sat,Sun 10:00-14:00"``,
``"12:00-13:30"`` (every day). A window whose end is before its start runs past midnight
(``"Fri 22:00-02:00"`` is Friday 22:00 to Saturday 02:00). Times are in the configured zone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from servetune.errors import ConfigError

_DAYS = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
_WINDOW = re.compile(
    r"^\s*(?:(?P<days>[A-Za-z,\-]+)\s+)?(?P<a>\d{1,2}:\d{2})\s*-\s*(?P<b>\d{1,2}:\d{2})\s*$"
)


def _minute(text: str, where: str) -> int:
    h, m = (int(x) for x in text.split(":"))
    if not (0 <= h <= 24 and 0 <= m < 60) or (h == 24 and m):
        raise ConfigError(f"peak hours {where!r}: {text} is not a time of day")
    return h * 60 + m


def _days(text: str | None, where: str) -> frozenset[int]:
    if not text:
        return frozenset(range(7))
    out: set[int] = set()
    for part in text.lower().split(","):
        ends = part.split("-")
        try:
            idx = [_DAYS.index(e[:3]) for e in ends if e]
        except ValueError:
            raise ConfigError(
                f"peak hours {where!r}: {part!r} is not a day (Mon, Tue, ... Sun)"
            ) from None
        if len(idx) == 1:
            out.add(idx[0])
        elif len(idx) == 2:
            a, b = idx
            out.update((a + i) % 7 for i in range((b - a) % 7 + 1))
        else:
            raise ConfigError(f"peak hours {where!r}: cannot read {part!r}")
    return frozenset(out)


@dataclass(frozen=True)
class Window:
    days: frozenset[int]
    start: int
    """Minutes after midnight."""
    end: int
    text: str

    def contains(self, t: datetime) -> bool:
        minute = t.hour * 60 + t.minute
        day = t.weekday()
        if self.start <= self.end:
            return day in self.days and self.start <= minute < self.end
        # past midnight: the evening part on a listed day, the morning part on the day after
        return (day in self.days and minute >= self.start) or (
            (day - 1) % 7 in self.days and minute < self.end
        )


class PeakHours:
    def __init__(self, windows: list[str], timezone: str = "UTC") -> None:
        try:
            self.tz = ZoneInfo(timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ConfigError(
                f"canary.timezone {timezone!r} is not a time zone", hint="e.g. UTC, Europe/Berlin"
            ) from None
        self.windows = [self._parse(w) for w in windows]

    @staticmethod
    def _parse(text: str) -> Window:
        m = _WINDOW.match(text)
        if not m:
            raise ConfigError(
                f"peak hours {text!r}: expected '[DAYS] HH:MM-HH:MM'",
                hint='e.g. "Mon-Fri 09:00-18:00"',
            )
        return Window(
            _days(m.group("days"), text),
            _minute(m.group("a"), text),
            _minute(m.group("b"), text),
            text,
        )

    def active(self, now: datetime | None = None) -> Window | None:
        t = (now or datetime.now(self.tz)).astimezone(self.tz)
        for w in self.windows:
            if w.contains(t):
                return w
        return None

    def seconds_until_clear(self, now: datetime | None = None, horizon_h: int = 24 * 8) -> float:
        """Seconds until no window is active (0 when none is now)."""
        t = (now or datetime.now(self.tz)).astimezone(self.tz)
        start = t
        step = timedelta(minutes=1)
        for _ in range(horizon_h * 60):
            if self.active(t) is None:
                return (t - start).total_seconds()
            t = (t + step).replace(second=0, microsecond=0)
        return float(horizon_h * 3600)
