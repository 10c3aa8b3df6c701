"""Short human formats shared by the sweep's verdicts and the report."""

from __future__ import annotations

import math

from servetune.results.schema import BenchConfig


def ms(v: float | None) -> str:
    """A latency in ms as a person reads it: 7.5 ms, 312 ms, 4.2 s, 61 s."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if v < 10:
        return f"{v:.1f} ms"
    if v < 1000:
        return f"{v:.0f} ms"
    if v < 10_000:
        return f"{v / 1000:.2f} s"
    return f"{v / 1000:.0f} s" if v >= 100_000 else f"{v / 1000:.1f} s"


def num(v: float | None, digits: int = 3) -> str:
    """A rate or count with ``digits`` significant digits, without exponent notation."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if math.isinf(v):
        return "inf"
    if v == 0:
        return "0"
    mag = math.floor(math.log10(abs(v)))
    decimals = max(0, digits - 1 - mag)
    text = f"{v:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def load(v: float, mode: str, rate_unit: str = "req/s") -> str:
    """An offered load: '32 req/s' (or '2 sessions/s') or 'concurrency 16'."""
    return f"{num(v)} {rate_unit}" if mode == "rate" else f"concurrency {num(v)}"


def rate_unit(bench: BenchConfig) -> str:
    """What a level's offered rate counts: sessions/s for a session workload whose
    ``--request-rate`` is in sessions (docs/workloads.md), else req/s."""
    if bench.dataset_name == "multiturn" and bench.multiturn.rate_unit == "sessions":
        return "sessions/s"
    return "req/s"


def loads(values: list[float]) -> str:
    return ",".join(num(v) for v in values)


METRIC_NAMES = {"ttft": "TTFT", "tpot": "TPOT", "e2el": "E2E"}
