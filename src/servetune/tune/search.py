"""The SLO-max rate of one configuration: a short search over request rates.

Starts from a predicted rate (the simulated engine's, or the best so far), never above the
configuration's *saturation throughput* less the search's resolution (``saturation / (1 +
tol)``; ``saturation``: the requests/s it completes with every request sent at once,
:func:`saturation_of`) when it is known — a short probe past
capacity can meet loose SLOs before its queue shows (a 1,000-request probe 5–30% over
capacity met P99 TTFT ≤ 3 s on the simulated engine while 4,000 requests at that rate gave
P99 TTFTs of 15–75 s) — then:

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
    draws: int = 1
    """:func:`step_down`: how many draws held ``slo_max`` (2 when the first met it within
    its noise)."""


def saturated(p: Probe, rate: float) -> bool:
    """The probe completed less than ``SATURATED`` of the rate its arrivals realize: the
    server could not keep up, and the probe is a miss whatever its latencies (however loose
    the SLOs, a server that cannot keep up does not serve that rate)."""
    if not (p.throughput > 0 and p.throughput < SATURATED * (p.offered or rate)):
        return False
    if p.meets:
        p.meets = False
        offered = p.offered or rate
        p.limiting = f"the server completed {p.throughput:.3g} req/s of {offered:.3g} offered"
    return True


def saturation_of(measure: Callable[[float], Probe]) -> float | None:
    """Requests/s the configuration completes with every request sent at once (one probe at
    an unbounded rate): no higher rate is served (None: that probe failed)."""
    p = measure(math.inf)
    if p.error is not None or p.throughput <= 0:
        return None
    return float(p.throughput)


def find_slo_max(
    measure: Callable[[float], Probe],
    start: float,
    *,
    floor: float = 0.05,
    ceiling: float = 1e5,
    tol: float = DEFAULT_TOL,
    max_probes: int = DEFAULT_MAX_PROBES,
    beat: float | None = None,
    saturation: float | None = None,
) -> SearchOutcome:
    """The SLO-max rate (see the module docstring); ``measure(rate)`` runs one probe; no rate
    above ``saturation / (1 + tol)`` is probed."""
    out = SearchOutcome()
    if saturation is not None and saturation > 0:
        # within the search's resolution of what it completes at full load the queue is a
        # random walk: one 4,000-request draw at that rate met the SLOs, another gave a P99
        # TTFT of 34 s (Qwen2.5-14B / L40S, simulated)
        ceiling = min(ceiling, saturation / (1 + tol))
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
        if saturated(p, rate):
            # the SLO-max lies below what it achieved
            cap = min(cap, p.throughput * 1.02)
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


def step_down(
    measure: Callable[[float], Probe],
    rate: float,
    *,
    tol: float = DEFAULT_TOL,
    max_probes: int = DEFAULT_MAX_PROBES,
    floor: float = 0.05,
    again: Callable[[float], Probe] | None = None,
    noise: float = 0.0,
) -> SearchOutcome:
    """From RATE down until a probe meets the SLOs: each miss lowers the rate by ``1 + tol``
    (below what the server completed when it could not keep up). ``slo_max`` is the rate
    that met (None: none of ``max_probes`` rates did).

    AGAIN, another draw of the workload: a probe that meets the SLOs with a margin (1 − its
    worst SLO figure / limit) under NOISE — the draw-to-draw noise of that ratio — is
    measured again with it, and the rate holds only when both draws meet (``draws`` 2); the
    second draw's miss steps down as any miss. A margin beyond the noise holds on one draw."""
    out = SearchOutcome()
    r = rate
    steps = 0
    while steps < max_probes and r >= floor:
        steps += 1
        p = measure(r)
        out.probes.append(p)
        if p.error is not None:
            out.error = p.error
            break
        saturated(p, r)
        out.draws = 1
        if p.meets and again is not None and 1.0 - (p.worst_ratio or 0.0) < noise:
            p = again(r)
            out.probes.append(p)
            out.draws = 2
            if p.error is not None:
                out.error = p.error
                break
            saturated(p, r)
        if p.meets:
            out.slo_max = r
            break
        out.upper, out.limiting = r, p.limiting
        nxt = r / (1 + tol)
        if 0 < p.throughput < (p.offered or r) / (1 + tol):
            nxt = min(nxt, p.throughput / (1 + tol))  # it did not keep up: below what it did
        r = nxt
    return out
