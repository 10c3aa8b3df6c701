"""Arrival processes: when each request of an open-loop run is sent.

``poisson``: exponential gaps; ``gamma``: gamma gaps with shape = burstiness and mean
1/rate (vLLM's ``--burstiness``: 1 = Poisson, lower = burstier, higher = more regular);
``constant``: equal gaps. An unbounded rate sends everything at once (closed loop when a
concurrency cap is set). The first request goes at t = 0.
"""

from __future__ import annotations

import math

import numpy as np

from servetune.errors import ConfigError
from servetune.results.schema import Arrival


def arrival_offsets(
    kind: Arrival,
    rate: float,
    n: int,
    seed: int,
    burstiness: float = 1.0,
) -> np.ndarray:
    """Planned send offsets in seconds for ``n`` requests (float64, non-decreasing)."""
    if n <= 0:
        return np.zeros(0)
    if not rate > 0:
        raise ConfigError.over_fields(
            f"{{request_rate}} must be > 0 (got {rate})",
            hint="use {request_rate}=inf with {max_concurrency}=N for a closed loop",
        )
    if math.isinf(rate):
        return np.zeros(n)
    if not burstiness > 0:
        raise ConfigError.over_fields(f"{{burstiness}} must be > 0 (got {burstiness})")
    rng = np.random.default_rng([seed, 0xA5])
    if kind == "constant":
        gaps = np.full(n - 1, 1.0 / rate)
    elif kind == "poisson" and burstiness == 1.0:
        gaps = rng.exponential(1.0 / rate, size=n - 1)
    else:
        shape = burstiness
        gaps = rng.gamma(shape, 1.0 / (rate * shape), size=n - 1)
    return np.concatenate(([0.0], np.cumsum(gaps)))


def count_for_duration(rate: float, duration_s: float) -> int:
    """How many planned arrivals to draw so that a ``duration_s`` window is covered."""
    mean = rate * duration_s
    return int(mean + 6 * math.sqrt(mean) + 16)
