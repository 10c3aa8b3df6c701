"""What limits a saturated server, in words: the cause another finding names, the
``--max-num-seqs`` cap as far as the metrics show, or the engine's step time with its
compute load against what the engine reaches at best."""

from __future__ import annotations

from collections.abc import Mapping

from servetune.diagnose.figures.table import Figures
from servetune.diagnose.model import Finding
from servetune.diagnose.rules import CAUSES, NEAR_CEILING, SPARE_COMPUTE


def what_limits(found: dict[str, Finding], fig: Figures) -> str:
    """What limits a saturated server, in words, from the other findings and the figures."""
    for rule in CAUSES:
        if rule in found and found[rule].kind == "bottleneck":
            return {
                "kv_pool_full": "the KV pool (see: KV pool full)",
                "batch_capped": "the --max-num-seqs cap (see: batch capped)",
                "prefill_blocked": "long prefills (see: long prefills stall the decodes)",
                "prefill_chunks_stall": "prefill chunks (see: prefill chunks stall the decodes)",
                "short_prompts_wait": "long prefills (see: short prompts wait)",
            }[rule]
    capped = found.get("batch_capped")
    if capped is not None and capped.kind == "cannot_tell":
        cap = fig.get("running_cap")
        return (
            f"the --max-num-seqs cap ({cap:.0f}) as far as the metrics show — whether the GPU "
            "has compute for a bigger batch cannot be told"
            if cap is not None
            else _cap_unknown(fig)
        )
    util = fig.get("gpu_utilization_mean")
    est = fig.get("compute_use_est")
    if (util is not None and util >= 0.9) or (est is not None and est >= SPARE_COMPUTE):
        if est is not None:
            return compute_words(est, fig.get("compute_ceiling"))
        return f"the engine's step time (GPU utilisation {util:.0%})"
    return "not identified from the metrics available"


def compute_near_ceiling(figures: Mapping[str, float]) -> bool:
    """Whether the estimated compute load is near what the engine reaches at best (a run's
    figures by name: a diagnosis' ``figures``, or ``Figures.values``)."""
    share = figures.get("compute_of_ceiling")
    return share is not None and share >= NEAR_CEILING


def compute_words(est: float, ceiling: float | None) -> str:
    """The compute limit in words that match the figures: "near its ceiling" only when the
    load is within 15% of what the engine reaches at best (its calibrated MFU)."""
    if ceiling:
        share = est / ceiling
        if share >= NEAR_CEILING:
            return (
                f"the engine's step time: compute is near its ceiling (estimated compute load "
                f"{est:.0%} of peak, {share:.0%} of the ~{ceiling:.0%} this engine reaches on "
                "this GPU)"
            )
        return (
            f"the engine's step time: compute-heavy steps (estimated compute load {est:.0%} of "
            f"peak, {share:.0%} of the ~{ceiling:.0%} this engine reaches — not at its ceiling)"
        )
    return (
        f"the engine's step time (estimated compute load {est:.0%} of peak; what this GPU "
        "reaches at best is unknown)"
    )


def _cap_unknown(fig: Figures) -> str:
    peak = fig.get("running_max")
    seen = f": running requests peaked at {peak:.0f}" if peak is not None else ""
    return (
        f"not identified from the metrics available{seen}, and whether that is the server's "
        '--max-num-seqs is unknown (pass --server-cmd "vllm serve MODEL …")'
    )
