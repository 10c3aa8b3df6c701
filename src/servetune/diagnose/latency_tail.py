"""The latency tail as a finding: a P99 TPOT or ITL ≥ 5× its median that no verdict explains
(prefills in the same steps, or a cause the data does not show), and a median ITL of 0 (tokens
arriving in bunches)."""

from __future__ import annotations

from servetune.diagnose.actions.build import build_action
from servetune.diagnose.conditions import fmt_ms, render
from servetune.diagnose.figures.table import Figures
from servetune.diagnose.model import Finding
from servetune.diagnose.rules import PREFILL_STALLS
from servetune.metrics.timeline import TAIL_RATIO

TAIL_EXPLAINED_BY = (
    "prefill_blocked",
    "prefill_chunks_stall",
    "short_prompts_wait",
    "kv_pool_full",
    "overloaded",
    "burst",
    "client_behind",
)
"""Verdicts that explain a long TPOT/ITL tail themselves (stalls, preemptions, queueing, a
burst, a client that could not keep up)."""


def tail_finding(fig: Figures, found: dict[str, Finding]) -> Finding | None:
    """A P99 TPOT or ITL ≥ 5× its median is never left unexplained: when no verdict that
    explains it fired, say where the slow gaps come from (prefills in the same steps), or that
    the client's data does not show it — a warning, so the run is not called healthy."""
    ratios = {
        "TPOT": (fig.get("tpot_tail_ratio"), fig.get("tpot_p99_ms"), fig.get("tpot_p50_ms")),
        "ITL": (fig.get("itl_tail_ratio"), fig.get("itl_p99_ms"), fig.get("itl_p50_ms")),
    }
    over = {k: v for k, v in ratios.items() if v[0] is not None and v[0] >= TAIL_RATIO}
    if not over:
        return bunched_finding(fig)
    if any(found.get(r) is not None and found[r].kind == "bottleneck" for r in TAIL_EXPLAINED_BY):
        return None
    if any(found.get(r) is not None and found[r].kind == "warning" for r in TAIL_EXPLAINED_BY):
        return None
    parts = [
        f"P99 {name} {fmt_ms(p99 or 0)} = {ratio:.1f}× its median ({fmt_ms(p50 or 0)})"
        for name, (ratio, p99, p50) in over.items()
    ]
    evidence = list(parts)
    for template in (
        "slow gaps (≥ 5× the P50 ITL): {slow_gaps:int}, of which {slow_gaps_at_prefill_share:pct} "
        "came while another request was prefilled",
        "stalls ≥ {stall_limit_ms:ms}: {stalls:int}; {stall_examples}",
        "step budget --max-num-batched-tokens {max_num_batched_tokens:tok}; chunked prefill "
        "{enable_chunked_prefill:flag}",
    ):
        line = render(template, fig)
        if line:
            evidence.append(line)
    share = fig.get("slow_gaps_at_prefill_share")
    seed = "(measurement validity) a tail is a finding: P99 TPOT or ITL ≥ 5× its median"
    if share is not None and share >= PREFILL_STALLS:
        budget = fig.get("max_num_batched_tokens")
        steps = f"of up to {budget:,.0f} tokens " if budget else ""
        title = (
            "; ".join(parts)
            + f": the slow gaps come when prefills {steps}run in the same engine steps as the "
            "decodes (no stall long enough to be a bottleneck)"
        )
        actions = [
            a
            for a in (
                build_action(i, fig) for i in ("shrink_prefill_steps", "long_prefill_threshold")
            )
            if a is not None
        ]
        return Finding(
            rule="latency_tail",
            kind="advisory",
            title=title,
            seed=seed,
            confidence="medium",
            priority=40,
            evidence=evidence,
            actions=actions,
            figures={k: fig.values[k] for k in ("tpot_tail_ratio", "itl_tail_ratio") if fig.has(k)},
        )
    why = (
        "the slow gaps do not line up with prefills"
        if share is not None
        else "the streams' gaps could not be attributed (no per-token times)"
    )
    return Finding(
        rule="latency_tail",
        kind="warning",
        title="; ".join(parts)
        + f": a latency tail whose cause the run's data does not show ({why}) — look for "
        "preemptions, host pauses or another tenant in the server's log before trusting the "
        "median",
        seed=seed,
        confidence="low",
        priority=45,
        evidence=evidence,
        figures={k: fig.values[k] for k in ("tpot_tail_ratio", "itl_tail_ratio") if fig.has(k)},
    )


def bunched_finding(fig: Figures) -> Finding | None:
    """A median ITL of 0 — most chunk gaps are 0: chunks arrived together, several in one
    read — makes the ITL tail's ratio to its median unbounded; it is named, not skipped: the
    tokens come in bunches (the server writes several at once, or they queued before the
    client read them), so ITL shows the bunches' cadence and TPOT is the per-token pace."""
    p50, p99, share = fig.get("itl_p50_ms"), fig.get("itl_p99_ms"), fig.get("itl_zero_share")
    if p50 is None or p50 > 0 or not p99 or share is None:
        return None
    tpot = render("P99 TPOT {tpot_p99_ms:ms} = {tpot_tail_ratio:x} its median", fig)
    return Finding(
        rule="latency_tail",
        kind="advisory",
        title=f"P50 ITL 0, P99 ITL {fmt_ms(p99)}: {share:.0%} of the chunk gaps are 0 — tokens "
        "arrive in bunches, so ITL shows the bunches' cadence and TPOT the per-token pace",
        seed="(measurement validity) a tail is a finding: P99 TPOT or ITL ≥ 5× its median",
        confidence="medium",
        priority=40,
        evidence=[
            f"{share:.0%} of the gaps between content chunks are 0: the chunks arrived together "
            "(the server writes several tokens at once — a stream interval above 1 — or they "
            "queued before the client read them)",
            *([tpot] if tpot else []),
        ],
        figures={k: fig.values[k] for k in ("itl_zero_share", "tpot_tail_ratio") if fig.has(k)},
    )
