"""Did a run measure the server, or its prefix cache? The server's hit rate against the ceiling
its own workload implies (``workload/prefix_share.py``).

    flagged  ⇔  measured hit rate > ceiling
    ceiling  =  implied + chat-template share × (1 − implied) + tolerance

``measured`` is the server's ``prefix_cache_hit_rate`` over the client's window (Δhits/Δqueries
of vLLM V1's counters, or the engine's own gauge; ``metrics/server_summary.py``). A run without
it (an engine that does not export it, or no scrape) cannot be checked and is not flagged.
"""

from __future__ import annotations

from pydantic import BaseModel

from servetune.results.schema import RunResult


class PrefixCacheCheck(BaseModel):
    measured: float
    implied: float
    ceiling: float
    flagged: bool

    def message(self) -> str:
        if not self.flagged:
            return (
                f"prefix-cache hit rate {self.measured:.0%}, as the workload implies "
                f"(≤ {self.ceiling:.0%})"
            )
        return (
            f"the server answered {self.measured:.0%} of prompt tokens from its prefix cache, "
            f"but this run's own prompts allow at most {self.ceiling:.0%} (they share "
            f"{self.implied:.0%}): it measured the cache, not the server — prompts seen "
            "before (an earlier run with the same --seed, or another client) were still "
            "cached; rerun with a fresh seed (leave out --seed) or restart the server"
        )


def check_prefix_cache(result: RunResult) -> PrefixCacheCheck | None:
    """The check for one run; None when the server's hit rate or the workload's facts are
    unknown."""
    facts = result.workload
    if facts is None or facts.implied_prefix_hit_rate is None:
        return None
    if facts.prefix_hit_rate_ceiling is None or result.server is None:
        return None
    measured = result.server.summary.get("prefix_cache_hit_rate")
    if not isinstance(measured, int | float):
        return None
    return PrefixCacheCheck(
        measured=float(measured),
        implied=facts.implied_prefix_hit_rate,
        ceiling=facts.prefix_hit_rate_ceiling,
        flagged=float(measured) > facts.prefix_hit_rate_ceiling,
    )
