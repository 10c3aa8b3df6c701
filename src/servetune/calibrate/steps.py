"""What the request records say about the engine's steps directly (the fit's start point).

Decode: a streamed token's gap after the one before is one engine step of the requests then
decoding; the number decoding at that moment is read off the records themselves (a request
decodes from its first token to its last); a gap in which another request got its first
token held a prefill too, and is left out. The median gap per batch size gives the decode
step's fixed part and its cost per request (``t ≈ A + B·n``).

Prefill: a request that arrived while nothing else was in flight waited for nothing but its
own prefill and the API server: its TTFT against its prompt length gives the prefill's cost
per prompt token and the fixed latency (``TTFT ≈ L + P·prompt``).
"""

from __future__ import annotations

import statistics
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from servetune.results.record import RequestRecord


@dataclass(frozen=True)
class Line:
    """``y ≈ intercept + slope·x`` over ``points`` points (None where too few)."""

    intercept: float
    slope: float
    points: int


def _fit_line(xs: Sequence[float], ys: Sequence[float], ws: Sequence[float]) -> Line | None:
    if len(set(xs)) < 2:
        if xs:
            return Line(statistics.fmean(ys), 0.0, len(xs))
        return None
    sw = sum(ws)
    mx = sum(w * x for w, x in zip(ws, xs, strict=True)) / sw
    my = sum(w * y for w, y in zip(ws, ys, strict=True)) / sw
    sxx = sum(w * (x - mx) ** 2 for w, x in zip(ws, xs, strict=True))
    sxy = sum(w * (x - mx) * (y - my) for w, x, y in zip(ws, xs, ys, strict=True))
    slope = sxy / sxx if sxx > 0 else 0.0
    return Line(my - slope * mx, slope, len(xs))


def decode_points(records: Sequence[RequestRecord]) -> list[tuple[float, float, float]]:
    """(requests decoding, median step seconds, gaps seen) per batch size of one run."""
    ok = [r for r in records if r.status == "ok" and len(r.chunk_ns) >= 3 and r.first_ns]
    if not ok:
        return []
    starts = sorted(r.first_ns or 0 for r in ok)
    ends = sorted(r.last_ns or r.end_ns for r in ok)
    by_n: dict[int, list[float]] = {}
    for r in ok:
        chunks = r.chunk_ns
        for a, b in pairwise(chunks[1:]):
            if bisect_right(starts, b) - bisect_right(starts, a):
                continue  # a prefill completed in this step: not a decode-only step
            mid = (a + b) // 2
            n = bisect_right(starts, mid) - bisect_left(ends, mid)
            if n >= 1:
                by_n.setdefault(n, []).append((b - a) / 1e9)
    return [
        (float(n), statistics.median(gaps), float(len(gaps)))
        for n, gaps in sorted(by_n.items())
        if len(gaps) >= 5
    ]


def decode_line(runs: Sequence[Sequence[RequestRecord]]) -> Line | None:
    """Decode step seconds against requests decoding, over the runs' points."""
    pts = [p for records in runs for p in decode_points(records)]
    return _fit_line([p[0] for p in pts], [p[1] for p in pts], [p[2] for p in pts])


def prefill_line(runs: Sequence[Sequence[RequestRecord]]) -> Line | None:
    """TTFT seconds against prompt tokens, over the requests that found the server idle."""
    xs: list[float] = []
    ys: list[float] = []
    for records in runs:
        ok = sorted(
            (r for r in records if r.status == "ok" and r.first_ns is not None),
            key=lambda r: r.send_ns,
        )
        busy_until = -1
        for r in ok:
            if r.send_ns > busy_until:
                xs.append(float(r.prompt_tokens or r.planned_input_len))
                ys.append(((r.first_ns or r.send_ns) - r.send_ns) / 1e9)
            busy_until = max(busy_until, r.end_ns)
    if len(xs) < 5:
        return None
    return _fit_line(xs, ys, [1.0] * len(xs))
