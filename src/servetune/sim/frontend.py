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

On ``/v1/chat/completions`` a request first has its messages rendered through the model's
chat template, synchronously, before its handler's first ``await`` that waits on anything
(the tokeniser runs on another thread). asyncio runs ready callbacks first in, first out, so
in a burst every request's template is rendered before any of them gets to its next stage:
the rendering is shared by the whole burst (:class:`SharedIntake`, processor sharing; each
request costs ``frontend_chat_per_request_ms``), and only then does the intake proper take the
requests one by one. A request alone (or requests spaced wider than the rendering) sees no
difference. What shows it: gpustack's 1,000 chat requests of 128 in / 4 out (vLLM 0.11.0)
have their tokens ~0.55 s apart on an H100 — one full 8,192-token prefill step, so the engine
had most of the burst running at once — and yet the mean first token came at 18.3 s of 22.7. A
one-by-one intake slow enough to hold the first tokens that long feeds the engine slower than
it computes (small steps, tokens milliseconds apart); a shared one holds everything back, then
hands the engine the burst. Completions requests have no such stage: the kvcached runs (vLLM
0.19, completions) decode at 5.6 ms a step, which 500 requests decoding at once cannot (their
KV cache alone is 33 GB a step, ≥ 9.9 ms at the H100's full bandwidth): there the requests
did reach the engine one by one.

The constants live in ``efficiency.json`` (``host``): ``frontend_per_request_ms``,
``frontend_chat_per_request_ms``, ``frontend_per_token_us``, ``frontend_chat_per_token_us`` and
``frontend_latency_ms``. The virtual-clock run (:mod:`servetune.sim.offline`) and the real-time
server (:mod:`servetune.sim.realtime`) both put this model in front of the engine, so that
``sim run`` and a client of ``sim serve`` see the same front end, the burst-shared template
stage included. Both take the loop's jobs in time order: a step's outputs before an intake
that comes after the step's end.
"""

from __future__ import annotations

from collections import deque

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

    def reserve(self, at_ns: int, work_ns: int) -> None:
        """Work of ``work_ns`` given to the loop at ``at_ns`` that ends elsewhere (a chat
        template rendered while the burst shares the loop): the loop's busy period grows by
        it, so later intake and outputs wait for it."""
        self.free_at = max(at_ns, self.free_at) + work_ns

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


class SharedIntake:
    """A stage of the API server's loop that a burst shares (the chat template), as an
    egalitarian processor-sharing server (times in ns): every request present gets an equal
    share of the loop until its ``per_request_ns`` of work is done, then moves on. All jobs are
    the same size, so they leave in the order they came; with a virtual clock ``V`` that runs at
    1/(jobs present), a job that arrives at ``V = v`` leaves when ``V = v + per_request``.
    Work-conserving: the loop's busy period ends when a one-by-one server's would
    (:meth:`ApiServer.reserve` books it)."""

    __slots__ = ("_ends", "_left", "now_ns", "per_request_ns", "v")

    def __init__(self, per_request_ns: int) -> None:
        self.per_request_ns = per_request_ns
        self.now_ns = -(1 << 62)
        self.v = 0.0
        """Virtual time at ``now_ns``."""
        self._ends: deque[float] = deque()
        """Virtual times at which the present jobs leave, oldest first."""
        self._left: list[int] = []
        """Departures not collected yet (:meth:`depart_until`)."""

    def __len__(self) -> int:
        return len(self._ends)

    def _advance(self, t_ns: int) -> None:
        ends = self._ends
        while ends:
            n = len(ends)
            t_leave = self.now_ns + (ends[0] - self.v) * n
            if t_leave > t_ns:
                break
            self.now_ns = round(t_leave)
            self.v = ends.popleft()
            self._left.append(self.now_ns)
        if ends and t_ns > self.now_ns:
            self.v += (t_ns - self.now_ns) / len(ends)
        if t_ns > self.now_ns:
            self.now_ns = t_ns

    def arrive(self, t_ns: int) -> None:
        """A request reaches the loop at ``t_ns`` (not before the last time it was told)."""
        self._advance(t_ns)
        if not self._ends:
            self.v = 0.0
        self._ends.append(self.v + self.per_request_ns)

    def next_departure(self) -> int | None:
        """When the oldest job leaves if nothing else arrives (None: no job)."""
        if self._left:
            return self._left[0]
        if not self._ends:
            return None
        return round(self.now_ns + (self._ends[0] - self.v) * len(self._ends))

    def depart_until(self, t_ns: int) -> list[int]:
        """The departure times ≤ ``t_ns``, oldest first (they leave the server)."""
        self._advance(t_ns)
        out, self._left = self._left, []
        return out
