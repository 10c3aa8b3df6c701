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

from array import array
from bisect import bisect_right
from collections.abc import Sequence

import numpy as np


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

    def deliver_all(self, times: Sequence[int], shift: int = 0) -> list[int]:
        """:meth:`deliver` of ``t − shift`` for sorted token times (a list or an ``array('q')``,
        read without a copy)."""
        if not times:
            return []
        if isinstance(times, array):
            arr = np.frombuffer(times, dtype=np.int64) - shift
        else:
            arr = np.asarray(times, dtype=np.int64) - shift
        out: list[int] = self.deliver_array(arr).tolist()
        return out

    def deliver_array(self, arr: np.ndarray) -> np.ndarray:
        """:meth:`deliver` of every time in ``arr`` (int64 ns, any order), in place and
        vectorized: only the busy periods between the earliest and the latest time are
        looked at (all of them exist once the engine's clock has passed those times)."""
        starts, ends = self._starts, self._ends
        if ends and len(arr):
            lo_t, hi_t = int(arr.min()), int(arr.max())
            if lo_t < ends[-1]:
                lo = max(0, bisect_right(starts, lo_t) - 1)
                hi = bisect_right(starts, hi_t)
                st = np.asarray(starts[lo:hi], dtype=np.int64)
                en = np.asarray(ends[lo:hi], dtype=np.int64)
                i = np.searchsorted(st, arr, side="right") - 1
                ic = np.maximum(i, 0)
                busy = (i >= 0) & (arr < en[ic])
                arr[busy] = en[ic[busy]]
        arr += self.latency_ns
        return arr

    def deliver(self, t_ns: int) -> int:
        """A token the engine produced at ``t_ns``: when the client gets it."""
        i = bisect_right(self._starts, t_ns) - 1
        if i >= 0 and t_ns < self._ends[i]:
            t_ns = self._ends[i]
        return t_ns + self.latency_ns
