"""How many load-generating processes a rate needs: each loop must stay well under a core.

The client's CPU cost per request (fixed part + per streamed chunk) was measured with
``benchmarks/client_capacity.py`` on a reference machine; a 20 ms probe of this machine's
speed on the same hot path (SSE parsing and JSON decoding) scales it.
"""

from __future__ import annotations

import math
import os
import time

from servetune.client.stream import StreamState

# Reference costs (seconds of one core), measured with one worker against the scripted
# server of benchmarks/client_capacity.py on the project's 2-core machine (2026-12-02, kernel
# arrival stamps on): ~0.45 ms a request when its 128 tokens arrive in one read (SSE + JSON of
# every event, record, bookkeeping), ~1.85-2.1 ms when each token is its own read: ~11 us a
# read (a wake-up, a recvmsg, de-chunking, one event). Unknown servers are assumed to send
# one read per token.
REF_COST_PER_REQUEST_S = 450e-6
REF_COST_PER_CHUNK_S = 11e-6
REF_PROBE_S = 0.0029
"""probe_speed() on that machine, unloaded."""
# A loop busier than this starts to send late and to stamp late (wake-ups queue behind work).
LOOP_BUDGET = 0.45

_EVENT = (
    b'data: {"id":"cmpl-1","object":"text_completion","model":"m","choices":[{"index":0,'
    b'"text":" hello","logprobs":null,"finish_reason":null}]}\n\n'
)


def probe_speed(events: int = 2000) -> float:
    """CPU seconds this machine takes for the reference probe (SSE + JSON, 2000 events)."""
    data = _EVENT * 8
    best = math.inf
    for _ in range(3):
        st = StreamState(chat=False)
        # CPU time, not wall time: time spent waiting for a busy core is not this machine's
        # speed, and a shared box would otherwise look slower than it is.
        t = time.process_time()
        for i in range(events // 8):
            st.feed(data, i)
        best = min(best, time.process_time() - t)
    return best


def cost_per_request_s(mean_chunks: float, speed_s: float | None = None) -> float:
    scale = (speed_s if speed_s is not None else probe_speed()) / REF_PROBE_S
    return scale * (REF_COST_PER_REQUEST_S + REF_COST_PER_CHUNK_S * mean_chunks)


def choose_workers(rate: float, mean_chunks: float, cpu_count: int | None = None) -> int:
    """Enough loops that each stays under LOOP_BUDGET of a core; at most one per core."""
    cpus = cpu_count or os.cpu_count() or 1
    if math.isinf(rate) or rate <= 0:
        return 1
    load = rate * cost_per_request_s(mean_chunks)
    return max(1, min(cpus, math.ceil(load / LOOP_BUDGET)))
