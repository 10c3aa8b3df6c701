"""Curve rows built straight from the schema, for the knee and SLO tests."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from servetune.results.sweep_schema import LevelRow, ServerMeans

RowsOf = Callable[..., list[LevelRow]]


def make_rows(
    loads: Sequence[float],
    throughput: Sequence[float],
    ttft: Sequence[float] | None = None,
    *,
    tpot: Sequence[float] | None = None,
    e2el: Sequence[float] | None = None,
    mode: str = "rate",
    mean_e2e: Sequence[float] | None = None,
    running: Sequence[float] | None = None,
    ci: float | None = None,
) -> list[LevelRow]:
    """One row per level; unspecified latencies are flat (so they never make a knee)."""
    n = len(loads)
    rows = []
    for i in range(n):
        load = float(loads[i])
        label = ("rate-" if mode == "rate" else "conc-") + (
            "inf" if math.isinf(load) else f"{load:g}"
        )
        p99 = {
            "ttft": ttft[i] if ttft is not None else 100.0,
            "tpot": tpot[i] if tpot is not None else 30.0,
            "e2el": e2el[i] if e2el is not None else 4000.0,
        }
        rows.append(
            LevelRow(
                label=label,
                level_dir=f"levels/{label}",
                mode=mode,  # type: ignore[arg-type]
                offered_rate=load if mode == "rate" else None,
                concurrency=int(load) if mode == "concurrency" else None,
                completed=500,
                duration_s=60.0,
                request_throughput=float(throughput[i]),
                output_throughput=float(throughput[i]) * 128,
                ttft_p99=p99["ttft"],
                tpot_p99=p99["tpot"],
                e2el_p99=p99["e2el"],
                e2el_mean=(mean_e2e[i] if mean_e2e is not None else p99["e2el"] * 0.7),
                p99_ci=(
                    {m: (v * (1 - ci), v * (1 + ci)) for m, v in p99.items()}
                    if ci is not None
                    else {}
                ),
                server=ServerMeans(running_mean=running[i]) if running is not None else None,
            )
        )
    return rows
