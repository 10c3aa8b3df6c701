"""The **body** and **caps** steps of a request: what the client sent, checked against its
tenant's limits, and the bytes that go upstream.

- **body** — a JSON object with ``model`` and well-typed fields (400 otherwise; the parse is
  :func:`~servetune.gateway.requests.parse_body`); its input tokens counted (or estimated);
- **caps** — input tokens over ``max_input_tokens`` → 400; ``n``/``best_of`` over
  ``max_choices`` → 400; the output bound (the tightest of every field an engine honours:
  :mod:`~servetune.gateway.output_bounds`) over the cap → clamped (or 400 with
  ``max_tokens_policy: refuse``), and set to the cap when absent (a tenant with a token quota
  must give one: the reservation needs it).

What goes upstream is the parsed body re-encoded with one bound, ``max_tokens`` — the one
capped and reserved — and no other length field. A stream that did not ask for usage is sent
with ``stream_options.include_usage`` (the reservation is settled to it) and the usage-only
chunk is taken out of the client's stream.
"""

from __future__ import annotations

from typing import Any

import orjson

from servetune.gateway.exposition import GatewayMetrics
from servetune.gateway.output_bounds import forward_bounds
from servetune.gateway.refusals import refuse
from servetune.gateway.requests import (
    ENDPOINTS,
    BadRequest,
    InputCounter,
    error_body,
    parse_body,
)
from servetune.gateway.tenants import TenantRuntime
from servetune.http import Exchange


class Prepared:
    """A checked request: what goes upstream and what it reserves."""

    __slots__ = ("body", "headers", "n_in", "payload", "reserve", "stream", "strip_usage")

    def __init__(
        self,
        payload: bytes,
        n_in: int,
        reserve: int,
        strip_usage: bool,
        headers: list[tuple[bytes, bytes]],
        stream: bool = True,
        body: dict[str, Any] | None = None,
    ) -> None:
        self.payload = payload
        self.body = body
        """The parsed body (what routing reads: the session and the prompt)."""
        self.n_in = n_in
        """Input tokens, counted or estimated."""
        self.reserve = reserve
        """Tokens reserved: input + max_tokens × choices (the fair queue's cost too)."""
        self.strip_usage = strip_usage
        """The gateway asked for the usage chunk: remove it from the client's stream."""
        self.headers = headers
        """Extra response headers (a clamp notice)."""
        self.stream = stream
        """The client asked for a stream (a whole answer's head comes only with its end)."""


def prepare(
    ex: Exchange,
    tenant: TenantRuntime,
    metrics: GatewayMetrics,
    counter: InputCounter,
    other_counters: list[InputCounter],
) -> Prepared | None:
    """Body, input count and caps checked; the bytes to send. None after a refusal.

    ``counter`` counts the input (the first group's tokenizer, else the estimate); each of
    ``other_counters`` (groups naming other tokenizers) counts it too, and the largest count
    is the request's."""
    name = tenant.name
    lim = tenant.limits
    try:
        parsed = parse_body(ex.body, ENDPOINTS[ex.path.rstrip("/")])
    except BadRequest as exc:
        metrics.reject(name, "bad_request")
        ex.respond(exc.status, error_body(exc.message, "invalid_request_error", None, exc.param))
        return None
    body = parsed.body
    n_in = counter.count(parsed)
    for other in other_counters:  # only when groups name different tokenizers
        n_in = max(n_in, other.count(parsed))
    if lim.max_input_tokens is not None and n_in > lim.max_input_tokens:
        how = "counted" if counter.exact else "estimated"
        refuse(
            metrics,
            ex,
            name,
            "input_too_long",
            400,
            f"the prompt has {n_in} tokens ({how}); this key's limit is {lim.max_input_tokens}",
            "invalid_request_error",
        )
        return None
    headers: list[tuple[bytes, bytes]] = []
    if parsed.endpoint == "embeddings":
        return Prepared(ex.body, n_in, n_in, False, headers, parsed.stream)
    max_tokens = parsed.max_tokens
    if lim.max_choices is not None and parsed.bounds.choices > lim.max_choices:
        refuse(
            metrics,
            ex,
            name,
            "choices_over_cap",
            400,
            f"n/best_of {parsed.bounds.choices} is over this key's limit of {lim.max_choices} "
            "sequences per request",
            "invalid_request_error",
        )
        return None
    if lim.max_tokens is not None and (max_tokens is None or max_tokens > lim.max_tokens):
        if max_tokens is not None and lim.max_tokens_policy == "refuse":
            refuse(
                metrics,
                ex,
                name,
                "max_tokens_over_cap",
                400,
                f"max_tokens {max_tokens} is over this key's cap of {lim.max_tokens}",
                "invalid_request_error",
            )
            return None
        if max_tokens is not None:
            headers.append((b"x-servetune-max-tokens-clamped", b"%d" % lim.max_tokens))
        max_tokens = lim.max_tokens
    if tenant.quota.tpm and max_tokens is None:
        refuse(
            metrics,
            ex,
            name,
            "max_tokens_required",
            400,
            "this key has a token quota: set max_tokens (the gateway reserves "
            "prompt + max_tokens before sending the request)",
            "invalid_request_error",
        )
        return None
    out_reserve = (max_tokens or 0) * parsed.choices
    # one bound forwarded, the one capped and reserved (every other name removed), in a body
    # re-encoded from what was parsed: the engine reads exactly what the gateway checked
    forward_bounds(body, parsed.bounds, max_tokens)
    strip_usage = False
    if parsed.stream and not parsed.usage_asked:
        opts = body.get("stream_options")
        body["stream_options"] = {**(opts or {}), "include_usage": True}
        strip_usage = True
    payload = orjson.dumps(body)
    return Prepared(payload, n_in, n_in + out_reserve, strip_usage, headers, parsed.stream, body)
