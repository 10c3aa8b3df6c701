"""The figures ``compare`` compares, as data: each one's vLLM-style key, how it is computed
from a run cut into time windows, its unit, which way is better, and whether it is a headline.

Kinds (``source`` names what :class:`~servetune.compare.windows.WindowedRun` holds):

========  =====================================================================================
pct       percentile ``q`` of a value set (linear interpolation, numpy's default) — requests'
          TTFT/TPOT/E2E in ms, or the pooled inter-chunk gaps (ITL)
mean      mean of a value set
rate      a per-window sum over the measured window's length (per second): completions,
          tokens, good requests, preemptions
count     a per-window sum (failed requests)
gauge     the time mean of a server gauge over its scrapes in the window (KV use, running,
          waiting, GPU use)
========  =====================================================================================

Headline figures form one family for the verdict (their intervals hold simultaneously); the
others form a second family, reported the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["pct", "mean", "rate", "count", "gauge"]
Better = Literal["lower", "higher"]


@dataclass(frozen=True)
class FigureDef:
    key: str
    label: str
    kind: Kind
    source: str
    unit: str
    better: Better
    headline: bool = False
    q: float | None = None
    scale: float = 1.0
    """Multiplies the computed value (gauges kept as 0–1 are shown as such: 1.0)."""


_LAT_NAMES = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2E"}
_HEADLINE_PCT = {("ttft", 50), ("ttft", 99), ("tpot", 50), ("tpot", 99), ("e2el", 99)}


def _latency_figures() -> list[FigureDef]:
    out: list[FigureDef] = []
    for metric, name in _LAT_NAMES.items():
        out.append(FigureDef(f"mean_{metric}_ms", f"mean {name}", "mean", metric, "ms", "lower"))
        for q in (50, 90, 99):
            out.append(
                FigureDef(
                    f"p{q}_{metric}_ms",
                    f"P{q} {name}",
                    "pct",
                    metric,
                    "ms",
                    "lower",
                    headline=(metric, q) in _HEADLINE_PCT,
                    q=float(q),
                )
            )
    return out


FIGURES: tuple[FigureDef, ...] = (
    *_latency_figures(),
    FigureDef(
        "request_throughput", "requests/s", "rate", "completed", "req/s", "higher", headline=True
    ),
    FigureDef(
        "output_throughput",
        "output tok/s",
        "rate",
        "output_tokens",
        "tok/s",
        "higher",
        headline=True,
    ),
    FigureDef("total_token_throughput", "total tok/s", "rate", "total_tokens", "tok/s", "higher"),
    FigureDef("request_goodput", "goodput req/s", "rate", "good", "req/s", "higher"),
    FigureDef("failed", "failed requests", "count", "failed", "requests", "lower"),
    FigureDef("kv_cache_usage_mean", "KV-cache use", "gauge", "kv_cache_usage", "0–1", "lower"),
    FigureDef("running_mean", "running (server)", "gauge", "running", "requests", "higher"),
    FigureDef("waiting_mean", "waiting (server)", "gauge", "waiting", "requests", "lower"),
    FigureDef("preemptions_per_s", "preemptions/s", "rate", "preemptions", "1/s", "lower"),
    FigureDef("gpu_utilization_mean", "GPU use", "gauge", "gpu_utilization", "0–1", "higher"),
)

BY_KEY: dict[str, FigureDef] = {f.key: f for f in FIGURES}
HEADLINE_KEYS: tuple[str, ...] = tuple(f.key for f in FIGURES if f.headline)
