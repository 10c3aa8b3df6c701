"""The notes a plan's rows carry about what they serve: a pre-quantized checkpoint to serve
(:data:`AWQ_NOTE`), and a quantized winner's quality check (:func:`quality_note`)."""

from __future__ import annotations

from servetune.results.plan_file import PlannedCandidate, PlanResult

AWQ_NOTE = (
    "serve a pre-quantized {q} checkpoint of the model (vLLM cannot quantize to {q} at load "
    "time); the name above is the base model's"
)


def _quantized(c: PlannedCandidate) -> list[str]:
    """What of the model a candidate serves at reduced precision (weights, KV cache)."""
    out = []
    if c.quantization not in ("auto", "none"):
        out.append(f"{c.quantization.upper()} weights")
    kv = str(c.knobs.get("kv_cache_dtype", "auto"))
    if kv.startswith("fp8"):
        out.append(f"an {kv.upper()} KV cache")
    return out


def quality_note(result: PlanResult, winner: PlannedCandidate) -> None:
    """A quantized winner is only a plan once its quality is checked (the seed: after
    quantizing, always run a quality regression); and when an unquantized candidate holds
    the same traffic for the same $/hour, the ranking's tie-break (headroom within the
    search's own tolerance) is no reason to take the quality risk — say so."""
    what = _quantized(winner)
    if not what or winner.usd_per_hour is None:
        return
    note = (
        f"it serves {' and '.join(what)}: check its answers against the unquantized model "
        "before serving it (`servetune quality --baseline URL --candidate URL`)"
    )
    plain = next(
        (
            c
            for c in result.candidates
            if c.status == "ok"
            and not _quantized(c)
            and c.usd_per_hour is not None
            and c.usd_per_hour <= winner.usd_per_hour * (1 + 1e-9)
        ),
        None,
    )
    if plain is not None and plain.headroom is not None and winner.headroom is not None:
        note += (
            f"; {plain.label} holds the same traffic unquantized for the same "
            f"${plain.usd_per_hour:,.2f}/hour (headroom {plain.headroom:+.0%} against "
            f"{winner.headroom:+.0%})"
        )
    winner.notes.append(note)
