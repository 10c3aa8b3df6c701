"""How often should the overload part of ``gateway_overhead.py`` pass? A model, not a measurement.

The overload part asks: at 10× the upstream's capacity, does an in-quota tenant's P99 TTFT
stay within 2× of its unloaded value? Its upstream admits 4 at a time; ``flood`` may hold 1
slot (its quota) and always has a request ready; ``light`` arrives Poisson at 5 req/s and
holds a slot ~130 ms. Light waits only when all slots are busy, and a wait is up to a whole
request long — so whether its P99 over ~250 requests lands on a wait decides a run.

This simulates that queue (strict priority for light's waiting requests, as the gateway's
fair queue has) with ``queue.priority_headroom`` *h*: the flood may take a slot only while
more than *h* are free or light has nothing running. Each simulated run draws 250 quiet and
250 flooded light requests (TTFT 22 ms ± 1.5 ms jitter plus any wait) and applies the
benchmark's test; the share of runs that pass is printed per *h*::

    python benchmarks/gateway_headroom_model.py [--runs 1000]

Printed on 2026-12-03 (1,000 runs): h 0 → 49 %, 1 → 64 %, 2 → 81 %, 3 → 90 % of runs pass. What no
headroom can remove: light arriving while it has nothing running and the flood takes the
slot, then four of its requests within that request's ~130 ms. Machine stalls are not
modelled (they decide the measured runs on a loaded box; see docs/gateway.md).
"""

from __future__ import annotations

import argparse
import heapq
import random

SLOTS = 4
SERVICE_S = 0.13
LIGHT_RATE = 5.0
TTFT_MS = 22.0
JITTER_MS = 1.5
REQUESTS = 250


def light_waits(headroom: int, rnd: random.Random, flood: bool = True) -> list[float]:
    """Seconds each of light's requests waited for a slot, in one simulated round."""
    arrivals: list[float] = []
    t = 0.0
    for _ in range(REQUESTS):
        t += rnd.expovariate(LIGHT_RATE)
        arrivals.append(t)
    ends: list[tuple[float, str]] = []  # (when a slot frees, whose)
    light = held = 0  # light's running requests, the flood's (0 or 1)
    queue: list[float] = []  # light's waiting arrivals, oldest first
    waits: list[float] = []

    def flood_try(now: float) -> None:
        nonlocal held
        keep = headroom if light else 0
        if flood and not held and not queue and SLOTS - light - held > keep:
            held = 1
            heapq.heappush(ends, (now + SERVICE_S, "flood"))

    flood_try(0.0)
    i = 0
    while i < len(arrivals) or queue:
        if i < len(arrivals) and (not ends or arrivals[i] <= ends[0][0]):
            now = arrivals[i]
            i += 1
            if SLOTS - light - held > 0 and not queue:
                light += 1
                heapq.heappush(ends, (now + SERVICE_S, "light"))
                waits.append(0.0)
            else:
                queue.append(now)
            continue
        now, who = heapq.heappop(ends)
        if who == "light":
            light -= 1
        else:
            held = 0
        while queue and SLOTS - light - held > 0:
            waits.append(now - queue.pop(0))
            light += 1
            heapq.heappush(ends, (now + SERVICE_S, "light"))
        flood_try(now)
    return waits


def p99(xs: list[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(0.99 * len(s)))]


def passes(headroom: int, seed: int) -> bool:
    rnd = random.Random(seed)
    quiet = [TTFT_MS + rnd.gauss(0, JITTER_MS) for _ in range(REQUESTS)]
    flooded = [TTFT_MS + rnd.gauss(0, JITTER_MS) + 1e3 * w for w in light_waits(headroom, rnd)]
    return p99(flooded) <= 2 * p99(quiet)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=1000)
    args = ap.parse_args()
    for h in range(SLOTS):
        ok = sum(passes(h, seed) for seed in range(args.runs))
        print(f"priority_headroom {h}: {ok / args.runs:.0%} of {args.runs} simulated runs pass")


if __name__ == "__main__":
    main()
