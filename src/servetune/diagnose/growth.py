"""The growth of the requests in flight: the figures of the ``overloaded`` rule, defined once
for a run (requests in flight from the requests' own send and end times), a window of server
metrics (the engine's running + waiting gauges) and the capacity planner's simulated points.

- **late growth** (:func:`late_growth`): the *smaller* of the least-squares slopes of the
  requests in flight over the third and the fourth quarter of the span. A server past capacity
  piles requests up steadily, in both; a step up in traffic fills the engine once, within one
  quarter, and a run's ramp-up from an idle server lies in its first half.
- **growth z** (:func:`growth_z`): the rise of the requests in flight over the span past the
  ramp-up, in standard deviations of the arrivals' own count noise. By flow balance the span
  saw ``arrivals = finished + rise``; Poisson arrivals vary by ``√arrivals``, so a server that
  keeps up shows a rise of about ``0 ± √arrivals`` and ``z = rise / √arrivals``. It is the
  noise gate of the growth: over a short window or near capacity, a quarter's slope is mostly
  chance (a dozen arrivals more than the mean), and the rule asks that the rise be told from
  chance first. (A server near capacity also queues up for a while on a burst of arrivals: a
  live finding needs the rule to hold for a time as well, :mod:`servetune.watch.hold`.)
"""

from __future__ import annotations

import math

import numpy as np

from servetune.metrics import timeline


def slope(ts: np.ndarray, ys: np.ndarray) -> float | None:
    """Least-squares slope of YS over TS; None with fewer than 3 points or no time span."""
    if ts.size < 3 or float(ts[-1] - ts[0]) <= 0:
        return None
    return timeline.slope(ts, ys)


def late_growth(ts: np.ndarray, inflight: np.ndarray, start: float, end: float) -> float | None:
    """Requests in flight per second over the last half of [START, END], the smaller of its
    two quarters' slopes (see the module docstring); None when a quarter has < 3 points."""
    half, three = start + (end - start) / 2, start + 3 * (end - start) / 4
    q3 = (ts >= half) & (ts <= three)
    q4 = ts >= three
    g3, g4 = slope(ts[q3], inflight[q3]), slope(ts[q4], inflight[q4])
    return None if g3 is None or g4 is None else min(g3, g4)


def growth_z(rise: float, finished: float) -> float | None:
    """RISE of the requests in flight over a span in which FINISHED requests completed, in
    standard deviations of the arrivals' count noise (module docstring)."""
    arrivals = finished + rise
    if not arrivals > 0:
        return None
    return rise / math.sqrt(arrivals)
