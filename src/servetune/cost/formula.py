"""The cost of a token, written once (the formula GKE Inference Quickstart publishes).

A deployment costs ``C`` US dollars an hour (GPUs × price per GPU-hour). Over a stretch where it
serves ``I`` input (prompt) tokens/s and ``O`` output (generated) tokens/s, the hour's cost is
split between the two kinds so that an input token costs ``1/r`` of an output token (prefill
processes a prompt token far more cheaply than decode makes an output token; ``r`` = 4 by
default, GKE's default, the 4:1 output:input price ratio common in API price lists)::

    output $/token   = (C / 3600) / (O + I / r)
    input  $/token   = output $/token / r
    blended $/token  = (C / 3600) / (I + O)           (any token, at this mix)

and $/Mtok = $/token × 10⁶. The three agree: ``I × input + O × output = (I + O) × blended
= C / 3600``. Idle capacity is paid for: the throughput is what was served, not what the
GPUs could serve, so a deployment at 30% of its capacity pays 3.3× per token.
"""

from __future__ import annotations

from pydantic import BaseModel

DEFAULT_R = 4.0
FORMULA = (
    "output $/Mtok = 1e6 × (USD per hour / 3600) / (output tok/s + input tok/s / r); "
    "input $/Mtok = output $/Mtok / r; blended $/Mtok = 1e6 × (USD per hour / 3600) / "
    "(input tok/s + output tok/s)"
)


class TokenCost(BaseModel):
    """US dollars per million tokens at one operating point."""

    input_usd_per_mtok: float | None
    output_usd_per_mtok: float | None
    blended_usd_per_mtok: float | None


def token_cost(usd_per_hour: float, input_tok_s: float, output_tok_s: float, r: float) -> TokenCost:
    """The formula above; None where nothing was served (a token cannot be priced)."""
    if r <= 0:
        raise ValueError("r must be > 0")
    per_s = usd_per_hour / 3600.0
    weighted = output_tok_s + input_tok_s / r
    total = input_tok_s + output_tok_s
    out = per_s / weighted * 1e6 if weighted > 0 else None
    return TokenCost(
        input_usd_per_mtok=None if out is None else out / r,
        output_usd_per_mtok=out,
        blended_usd_per_mtok=per_s / total * 1e6 if total > 0 else None,
    )
