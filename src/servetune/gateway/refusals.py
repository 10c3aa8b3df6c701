"""How the gateway refuses a request itself: an OpenAI-shaped error, counted once.

A refusal is answered before anything is forwarded (a check, the quota, the fair queue) and
counted as a rejection of its tenant with the reason; a 429 or 503 says when to come back
(``Retry-After``, whole seconds, at least 1).
"""

from __future__ import annotations

import math

from servetune.gateway import quota as q
from servetune.gateway.exposition import GatewayMetrics
from servetune.gateway.pool import QueueRefusal
from servetune.gateway.requests import error_body
from servetune.http import Exchange


def retry_after(seconds: float | None) -> list[tuple[bytes, bytes]]:
    """The ``Retry-After`` header for ``seconds`` (none for None)."""
    if seconds is None:
        return []
    return [(b"Retry-After", b"%d" % max(1, math.ceil(seconds)))]


def refuse(
    metrics: GatewayMetrics,
    ex: Exchange,
    tenant: str,
    reason: str,
    status: int,
    message: str,
    type_: str,
    retry_after_s: float | None = None,
) -> None:
    """Answer ``status`` with ``message`` and count it as ``tenant``'s rejection for ``reason``."""
    metrics.reject(tenant, reason)
    metrics.requests[(tenant, "", str(status))] += 1
    ex.respond(status, error_body(message, type_, reason), headers=retry_after(retry_after_s))


def quota_refused(metrics: GatewayMetrics, ex: Exchange, tenant: str, res: q.Refusal) -> None:
    """The quota's refusal: 400 when it can never pass, 503 when the shared state is down,
    else 429 with the time until the bucket has room."""
    if res.reason == "tpm_too_large":
        return refuse(metrics, ex, tenant, res.reason, 400, res.message, "invalid_request_error")
    if res.reason == "state_unavailable":
        return refuse(metrics, ex, tenant, res.reason, 503, res.message, "server_error", 1.0)
    type_ = {"rpm": "requests", "tpm": "tokens"}.get(res.reason, "requests")
    refuse(metrics, ex, tenant, res.reason, 429, res.message, type_, res.retry_after_s or 1.0)


def queue_refused(metrics: GatewayMetrics, ex: Exchange, tenant: str, exc: QueueRefusal) -> None:
    """The fair queue's refusal of a first slot: 503 when no upstream can serve, else 429."""
    status = 503 if exc.reason == "no_upstream" else 429
    type_ = "server_error" if status == 503 else "requests"
    refuse(metrics, ex, tenant, exc.reason, status, exc.message, type_, exc.retry_after_s)
