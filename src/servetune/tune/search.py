"""The SLO-max rate of one configuration: a short search over request rates.

Starts from a predicted rate (the simulated engine's, or the best so far), then:

1. *bracket*: a probe that meets the SLOs raises the rate (×``GROWTH``), one that misses
   lowers it (÷``GROWTH``), until one meets and one misses; a probe whose achieved throughput
   fell well short of the offered rate shows the server saturated there: the SLO-max cannot
   be above what it achieved (the knee's evidence caps the upper end), and the probe counts
   as a miss whatever its latencies (a short run at an overload may not show it in them);
2. *bisect* geometrically between the highest rate that met and the lowest that missed,
   until they are within ``tol`` of each other or the probes run out;
3. *stop early* when a rate at or below the rate to beat (the best configuration so far)
   missed twice: this one cannot win, and more probes would only say by how much. The first
   such miss is measured again before the configuration is given up — one stall of a shared
   machine must not discard what may be the best configuration (if the second probe meets,
   the miss does not count and the search goes on).

The result is the highest rate measured to meet the SLOs (never an interpolation).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from pydantic import BaseModel, Field

from servetune.results.tune_file import Probe

GROWTH = 1.6
DEFAULT_TOL = 0.05
DEFAULT_MAX_PROBES = 8
SATURATED = 0.8
"""A probe completing less than 80% of the rate its arrivals realize saturated the server.
(A run's throughput counts its drain after the last arrival too: with the default 1,000
prompts that costs little; a run of a few dozen requests with long outputs may look
saturated below its capacity, so give probes enough prompts.)"""


class SearchOutcome(BaseModel):
    slo_max: float | None = None
    """Highest rate measured to meet the SLOs (None: not even the lowest probe did)."""
    upper: float | None = None
    """Lowest rate measured to miss them (None: never missed)."""
    probes: list[Probe] = Field(default_factory=list)
    pruned: bool = False
    """Stopped because it could not beat the rate to beat."""
    error: str | None = None
    limiting: str | None = None
    """What limited the configuration at its upper end (the SLO missed first)."""


def find_slo_max(
    measure: Callable[[float], Probe],
    start: float,
    *,
    floor: float = 0.05,
    ceiling: float = 1e5,
    tol: float = DEFAULT_TOL,
    max_probes: int = DEFAULT_MAX_PROBES,
    beat: float | None = None,
) -> SearchOutcome:
    """The SLO-max rate (see the module docstring); ``measure(rate)`` runs one probe."""
    out = SearchOutcome()
    lo: float | None = None  # highest rate that met
    hi: float | None = None  # lowest rate that missed
    cap = ceiling
    rate = min(max(start, floor), ceiling)
    confirming: float | None = None  # a miss at or below the rate to beat, measured again
    hi_before: float | None = None

    def run(r: float) -> Probe | None:
        p = measure(r)
        out.probes.append(p)
        if p.error is not None:
            out.error = p.error
            return None
        return p

    while len(out.probes) < max_probes:
        p = run(rate)
        if p is None:
            break
        if p.throughput > 0 and p.throughput < SATURATED * (p.offered or rate):
            # saturated: the SLO-max lies below what it achieved (however loose the SLOs, a
            # server that cannot keep up does not serve that rate)
            cap = min(cap, p.throughput * 1.02)
            if p.meets:
                p.meets = False
                p.limiting = (
                    f"the server completed {p.throughput:.3g} req/s of "
                    f"{p.offered or rate:.3g} offered"
                )
        if p.meets:
            if confirming == rate:  # the miss did not repeat: it does not count
                hi = hi_before
            lo = rate if lo is None else max(lo, rate)
        else:
            if confirming is None:
                hi_before = hi
            hi = rate if hi is None else min(hi, rate)
            out.limiting = p.limiting
        if beat is not None and hi is not None and hi <= beat:
            if confirming is None and len(out.probes) < max_probes:
                confirming = rate = hi  # once: a stall of the machine is not a verdict
                continue
            # the SLO-max lies below the rate to beat: this configuration cannot win
            out.pruned = True
            break
        if lo is None:
            if rate <= floor:
                break
            rate = max(floor, rate / GROWTH)
            if hi is not None and p.throughput > 0:
                # saturated: the SLO-max lies below what it achieved
                rate = max(floor, min(rate, p.throughput * 0.9))
            continue
        if hi is None:
            if rate >= cap or rate >= ceiling:
                break
            rate = min(rate * GROWTH, cap, ceiling)
            if rate <= lo * (1 + tol):
                break
            continue
        if hi / lo <= 1 + tol:
            break
        rate = math.sqrt(lo * hi)
    out.slo_max = lo
    out.upper = hi
    return out
