"""vLLM's API server in front of the engine, as the offline simulator models it.

The OpenAI server is one Python process with one event loop, a single server working through
its jobs in the order they arrive:

* each incoming request costs it ``per_request`` of that loop (parsing, the chat template,
  tokenising the prompt, handing the request to the engine core, and later its final chunk);
* each batch of outputs the engine core sends back after a step costs ``per_token`` for every
  token in it (detokenising, building and writing the stream chunk).

While the loop works on one job the others wait, so a burst of N requests lets the engine start
on the first ones early, but no client sees a token before the server has taken in all N —
what the dennislee22 runs (vLLM 0.10.1.1) show: prompts already in the prefix cache still wait
~N × the per-request time for their first token. (The kvcached runs, vLLM 0.19.0, look
different: the first tokens of a 500-request burst spread over the intake, as if the loop
interleaved intake and outputs; see docs/sim.md, fidelity.) A step's tokens reach the clients
``n × per_token`` after it, later still when the loop is behind. Every token also takes a fixed
``latency`` from the engine to the client (inter-process hop, HTTP write).

The constants live in ``efficiency.json`` (``host``): ``frontend_per_request_ms``,
``frontend_per_token_us`` and ``frontend_latency_ms`` (and the chat endpoint's extras). The
virtual-clock run (:mod:`servetune.sim.offline`) and the real-time server
(:mod:`servetune.sim.realtime`) both put this model in front of the engine, so that
``sim run`` and a client of ``sim serve`` see the same front end.
"""

from __future__ import annotations

import numpy as np


class ApiServer:
    """The API server's loop as one FIFO server (times in ns on the engine's clock)."""

    __slots__ = ("free_at", "latency_ns", "per_request_ns", "per_token_ns")

    def __init__(self, per_request_ns: int, latency_ns: int, per_token_ns: int = 0) -> None:
        self.per_request_ns = per_request_ns
        self.latency_ns = latency_ns
        self.per_token_ns = per_token_ns
        self.free_at = -(1 << 62)
        """When the loop finishes the jobs it has been given."""

    def accept(self, send_ns: int, extra_ns: int = 0) -> int:
        """A request sent at ``send_ns``: when the engine core gets it (``extra_ns``: more
        loop time for this one, e.g. the chat template)."""
        self.free_at = max(send_ns, self.free_at) + self.per_request_ns + extra_ns
        return self.free_at

    def deliver(self, end_ns: int, service_ns: int) -> int:
        """The outputs of one step that ended at ``end_ns`` and cost the loop ``service_ns``:
        when they reach the clients, latency included. Without a cost the loop is not held
        (it only waits for what it was already given), as in :meth:`outputs`."""
        free = end_ns if end_ns > self.free_at else self.free_at
        if service_ns:
            free += service_ns
            self.free_at = free
        return free + self.latency_ns

    def outputs(self, ends_ns: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """When the tokens of steps that ended at ``ends_ns`` (in order) with ``tokens``
        tokens each reach their clients: ``D_j = max(t_j, D_{j−1}) + n_j × per_token``
        (plus the latency), computed for all the steps at once: with ``S`` the running sum of
        the service times, ``D_j = S_j + max(free_at, max_{k≤j}(t_k − S_{k−1}))``."""
        if not len(ends_ns):
            return np.zeros(0, dtype=np.int64)
        service = tokens.astype(np.int64) * self.per_token_ns
        total = np.cumsum(service)
        done = total + np.maximum(self.free_at, np.maximum.accumulate(ends_ns - (total - service)))
        self.free_at = int(done[-1])
        out: np.ndarray = done + self.latency_ns
        return out

    def outputs_few(self, ends_ns: list[int], tokens: list[int]) -> list[int]:
        """:meth:`outputs` for a few steps, job by job."""
        free, per_token, lat = self.free_at, self.per_token_ns, self.latency_ns
        out = []
        for t, n in zip(ends_ns, tokens, strict=True):
            free = (t if t > free else free) + n * per_token
            out.append(free + lat)
        self.free_at = free
        return out
