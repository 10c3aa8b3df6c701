"""vLLM's API server in front of the engine, as the offline simulator models it.

The OpenAI server is one Python process with one event loop. Each incoming request costs it
some time of that loop (parsing, tokenising the prompt, handing the request to the engine
core), one request after another; while the loop is busy with that, the outputs the engine
core sends back wait to be detokenised and written. Every token also takes a fixed time from
the engine to the client (inter-process hop, detokenisation, HTTP write). So a burst of N
requests at once lets the engine start on the first ones early, but no client sees a token
before the server has taken in all N — which is what the published ``request_rate=inf`` runs
show: prompts already in the prefix cache still wait ~N × the per-request time for their first
token.

Both constants live in ``efficiency.json`` (``host``): ``frontend_per_request_ms`` and
``frontend_latency_ms``.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right


class ApiServer:
    """Serial request intake and token delivery (all times in ns on one clock)."""

    __slots__ = ("_ends", "_starts", "free_at", "latency_ns", "per_request_ns")

    def __init__(self, per_request_ns: int, latency_ns: int) -> None:
        self.per_request_ns = per_request_ns
        self.latency_ns = latency_ns
        self.free_at = -(1 << 62)
        self._starts: list[int] = []
        self._ends: list[int] = []
        """Busy periods of the loop, in time order (merged when they touch)."""

    def accept(self, send_ns: int) -> int:
        """A request sent at ``send_ns``: when the engine core gets it."""
        start = max(send_ns, self.free_at)
        end = start + self.per_request_ns
        if self._ends and start <= self._ends[-1]:
            self._ends[-1] = end
        else:
            self._starts.append(start)
            self._ends.append(end)
        self.free_at = end
        return end

    def deliver_all(self, times: list[int], shift: int = 0) -> list[int]:
        """:meth:`deliver` of ``t − shift`` for sorted token times; those after the last busy
        period (nearly all) cost one addition each."""
        d = self.latency_ns - shift
        ends = self._ends
        k = bisect_left(times, ends[-1] + shift) if ends else 0
        head = [self.deliver(t - shift) for t in times[:k]]
        tail = times[k:] if d == 0 else [t + d for t in times[k:]]
        return head + tail if head else tail

    def deliver(self, t_ns: int) -> int:
        """A token the engine produced at ``t_ns``: when the client gets it."""
        i = bisect_right(self._starts, t_ns) - 1
        if i >= 0 and t_ns < self._ends[i]:
            t_ns = self._ends[i]
        return t_ns + self.latency_ns
