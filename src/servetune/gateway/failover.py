"""The tries of one request before its first byte: which upstreams failed it, and whether it
tries another.

A 500/502/503/504 head, a reset, a connect error or the first-byte deadline before the head
count against the upstream (its circuit breaker and ``failures{upstream,kind}``, ``kind``
``status``, ``reset``, ``connect`` or ``timeout``) and, while ``retries`` are left, send the
request to another upstream of the group (one not tried yet when there is one;
``retries{upstream}``); never after the head, when the answer is the client's. A
non-streamed request that timed out is retried only on an upstream not tried yet: its head
comes with its end, so the engine that timed out is generating the answer, and sending it
there again doubles its work and cannot be faster; with no other upstream the client gets a
504. (A stream's head comes before its first token: no head in time means the engine has
not started it, and it may be tried again there.)
A reused kept-alive connection that the server had closed is replaced once by a fresh one,
which is no failure — when it had sat idle for :data:`RACE_IDLE_S` or more (the keep-alive
race of a server timing out idle connections: no server's time-out is shorter). A connection
lost before its head sooner after its last answer is the upstream's failure like any reset
(an engine that crashed on the request must not hide behind the race). When the tries run
out the client gets a 502 (a 504 after a timeout) that names the last error; when no slot
comes for a retry, the fair queue's 503 with it.
"""

from __future__ import annotations

from servetune.gateway.exposition import GatewayMetrics
from servetune.gateway.pool import QueueRefusal, Upstream
from servetune.gateway.requests import error_body

RACE_IDLE_S = 1.0
"""A reused connection lost before its head after sitting idle at least this long may have
been closed by the server's keep-alive time-out as the request went out (retried fresh, no
failure); sooner, the loss is the upstream's failure."""

RETRY_STATUSES = (500, 502, 503, 504)
"""Response statuses that are retried on another upstream (before the first byte)."""


class Tries:
    __slots__ = ("attempts", "fresh_retried", "last_error", "last_kind", "tried")

    def __init__(self) -> None:
        self.attempts = 0
        """Failed tries so far."""
        self.tried: list[Upstream] = []
        """The upstreams that failed this request (avoided by the next try)."""
        self.fresh_retried = False
        self.last_error = ""
        self.last_kind = ""

    def fresh_once(self, reused: bool, idle_s: float) -> bool:
        """A lost connection: is this the one fresh retry of a reused connection (the server
        had closed it while idle, ``idle_s`` before the request went out)?"""
        if reused and not self.fresh_retried and idle_s >= RACE_IDLE_S:
            self.fresh_retried = True
            return True
        return False

    def failed(
        self, u: Upstream, error: str, metrics: GatewayMetrics, retries: int, kind: str
    ) -> bool:
        """``u`` failed the request with ``error`` (``kind``: ``connect``, ``reset``,
        ``timeout``, ``status``): counted against it; True when another upstream is to be
        tried (counted as a retry), False when the tries are used up."""
        self.last_error = error
        self.last_kind = kind
        metrics.failures[(u.url, kind)] += 1
        u.breaker.failure()
        self.tried.append(u)
        self.attempts += 1
        if self.attempts > retries:
            return False
        metrics.retries[u.url] += 1
        self.fresh_retried = False
        return True

    def timed_out(self, u: Upstream) -> bool:
        """The last failure was a timeout and ``u`` already had this request (a whole answer
        is then not sent to ``u`` again)."""
        return self.last_kind == "timeout" and u in self.tried

    def exhausted(self) -> bytes:
        """The 502 (504 after a timeout) body when the tries are used up."""
        return error_body(
            f"upstream failed before answering ({self.last_error}); tried {self.attempts} time(s)",
            "upstream_error",
            "upstream_unavailable",
        )

    def no_slot(self, exc: QueueRefusal) -> bytes:
        """The 503 body when the fair queue gives a retry no slot."""
        return error_body(f"{exc.message} (after: {self.last_error})", "server_error", exc.reason)
