"""The **settle** step: what a request used, and what it is recorded as.

A request's :class:`Attempt` collects how it ended — the status committed to, the first
token's time, the engine's ``usage`` (or the stream's own count without one). From it:

- **the tokens used** (:func:`tokens_used`), to which the reservation is settled and the fair
  queue charged the difference: the engine's ``usage`` when it sent one; else the prompt plus
  the output estimated from the stream (:func:`stream_usage`: the serving group's tokenizer,
  at most the ``max_tokens`` reserved); a request the client left while the engine had it and
  before its head: the prompt for a stream, the whole reservation for a whole answer (its
  head comes with its end: nothing tells what was generated); nothing when no engine had it;
- **the record** (:func:`record`): the request's metrics (TTFT, TPOT, E2E from its arrival)
  and the canary's observation (latencies from when the request left, so that the compared
  upstreams are measured alike; a request that failed before any answer is an error of its
  group).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import orjson

from servetune.gateway.canary import Observation
from servetune.gateway.checks import Prepared
from servetune.gateway.exposition import GatewayMetrics
from servetune.gateway.output_estimate import output_estimate
from servetune.gateway.relay import Relay
from servetune.gateway.requests import InputCounter


class Attempt:
    """What one request ended with (for settlement, metrics and the canary)."""

    __slots__ = (
        "code",
        "error",
        "first_ns",
        "output",
        "prompt",
        "sent_ns",
        "unanswered",
        "usage_exact",
        "whole",
    )

    def __init__(self) -> None:
        self.code = 0
        self.unanswered = False
        """The client left after the request reached the engine and before the answer's head:
        nothing says what the engine generated (see :func:`tokens_used`)."""
        self.error = False
        self.first_ns = 0
        self.sent_ns = 0
        self.prompt = 0
        self.output = 0
        self.usage_exact = False
        self.whole = False
        """A non-streamed answer: its tokens came at once (no time per output token)."""


def stream_usage(
    att: Attempt,
    relay: Relay,
    prep: Prepared,
    group: str,
    counters: dict[str, InputCounter],
    default_counter: InputCounter,
) -> None:
    """A streamed answer's first token and tokens, from the engine's usage or, without one
    (cut, or an engine that does not send it), estimated from the stream with ``group``'s
    counter (``default_counter`` unless it names a tokenizer), at most the max_tokens
    reserved."""
    att.first_ns = relay.first_token_ns
    u = relay.usage
    if u is not None:
        att.prompt = int(u.get("prompt_tokens") or 0)
        att.output = int(u.get("completion_tokens") or 0)
        att.usage_exact = True
    elif relay.events:
        own = counters.get(group)
        counter = own if own is not None and own.exact else default_counter
        est = output_estimate(relay, counter.text)
        cap = prep.reserve - prep.n_in  # max_tokens × choices (0: none given)
        att.output = min(est, max(cap, relay.events - 1)) if cap > 0 else est
    else:
        att.output = 0


def usage_from_json(data: bytes, att: Attempt) -> None:
    """A whole answer's tokens, from its ``usage`` (its tokens came now, all at once)."""
    att.first_ns = time.perf_counter_ns()
    att.whole = True
    if b'"usage"' not in data:
        return
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return
    u = obj.get("usage") if isinstance(obj, dict) else None
    if isinstance(u, dict):
        att.prompt = int(u.get("prompt_tokens") or 0)
        att.output = int(u.get("completion_tokens") or 0)
        att.usage_exact = True


def tokens_used(att: Attempt, prep: Prepared) -> int:
    """The tokens the request is settled to."""
    if att.usage_exact:
        return att.prompt + att.output
    if att.sent_ns:
        return prep.n_in + att.output  # no usage from the engine: estimated from the stream
    if att.unanswered:
        # the client left while the engine had the request. A stream's head comes before
        # its first token: the prompt was all it cost. A whole answer's head comes with its
        # end, so up to max_tokens may have been generated, which nothing tells: the
        # reservation is kept (else a client that hangs up just before a long answer ends
        # would never be charged for it)
        return prep.reserve if not prep.stream else prep.n_in
    return 0  # never reached an engine


def record(
    metrics: GatewayMetrics,
    observe: Callable[[Observation], None],
    tenant: str,
    group: str,
    att: Attempt,
    arrival_ns: int,
    n_in: int,
    step: int | None,
) -> None:
    """The request's metrics, and the canary's observation when a rollout ``step`` runs."""
    if att.code == 0 or not group:
        return
    now = time.perf_counter_ns()
    ok = 200 <= att.code < 300 and not att.error
    ttft = (att.first_ns - arrival_ns) / 1e9 if ok and att.first_ns else None
    e2e = (now - arrival_ns) / 1e9 if ok else None
    tpot = None  # a whole answer has none: its tokens came together (not 0 s apart)
    if ok and att.first_ns and att.output > 1 and not att.whole:
        tpot = (now - att.first_ns) / 1e9 / (att.output - 1)
    metrics.observe_request(
        tenant,
        group,
        att.code,
        ttft,
        tpot,
        e2e,
        att.prompt if att.usage_exact else n_in,
        att.output,
    )
    if step is not None and att.code != 499 and att.sent_ns:
        # only an answer the request committed to: each try that failed before its answer
        # (connect refused, reset, 5xx, no head in time) was observed as an error of the
        # failing upstream's group when it failed (Flight._failed), retried or not.
        # The canary compares the upstreams: latencies from the moment the request left
        c_ttft = (att.first_ns - att.sent_ns) / 1e9 if ok and att.first_ns else None
        c_e2e = (now - att.sent_ns) / 1e9 if ok else None
        observe(Observation(group, step, c_ttft, tpot, c_e2e, not ok))
