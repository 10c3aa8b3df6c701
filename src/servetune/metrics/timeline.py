"""Statistics over a run's timeline: stretches of a gauge past a threshold, the trend of
requests in flight, finished versus sent, and the stalls the token streams saw — with the
prefills that ran while they stalled. Times are run seconds (the records' clock / 1e9).

Definitions (the diagnosis quotes these constants; they are written only here):

``stretches``     maximal runs of consecutive samples where a condition held, each
                  ``(first sample, last sample + step/2)``, longest first.
``slope``         the least-squares slope of y over t:
                  ``Σ (t − t̄)(y − ȳ) / Σ (t − t̄)²`` (per second).
``in flight``     at time t: requests sent at or before t minus requests ended at or
                  before t.
``served/sent``   over a window [a, b]: requests ended in it / requests sent in it; the
                  shortfall in standard deviations ``z = (sent − served) / √(sent + served)``
                  (both counts Poisson-like).
``stall``         a gap between two consecutive tokens of one stream of at least
                  ``max(STALL_FACTOR × the run's P50 ITL, STALL_MIN_MS)``; overlapping gaps of
                  several streams are one engine stall (``merge_intervals``).
``prefill in a stall``  a request whose first token arrived within the stall, or within
                  ``tolerance`` of its end: the engine step that held the streams back ran
                  that request's prefill (its prompt is what the step computed).
``tail ratio``    P99 / P50 of TPOT or ITL; from ``TAIL_RATIO`` on, a tail the diagnosis must
                  explain.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from servetune.results.record import RequestRecord

STALL_FACTOR = 10.0
STALL_MIN_MS = 250.0
"""A gap between two tokens of one stream is a stall when ≥ 10× the median gap and ≥ 250 ms."""
TAIL_RATIO = 5.0
"""P99 TPOT or ITL at or above 5× its median is a tail the diagnosis must name the cause of."""


def stall_limit_ms(itl_p50_ms: float) -> float:
    """The shortest gap that counts as a stall for a run whose P50 ITL is ``itl_p50_ms``."""
    return max(STALL_FACTOR * itl_p50_ms, STALL_MIN_MS)


def attribution_tolerance_s(itl_p50_ms: float) -> float:
    """How close to a stall's end a first token must arrive to have ended it: the decodes
    that resume and the prefill that held them come out of the same engine step."""
    return max(3.0 * itl_p50_ms, 30.0) / 1e3


def stretches(
    ts: np.ndarray, mask: np.ndarray, step: float | None = None
) -> list[tuple[float, float]]:
    """Maximal runs of consecutive True samples as (start, end) seconds, longest first."""
    if ts.size == 0:
        return []
    if step is None:
        step = float(np.median(np.diff(ts))) if ts.size > 1 else 0.0
    out: list[tuple[float, float]] = []
    start: float | None = None
    prev = float(ts[0])
    for t, m in zip(ts.tolist(), mask.tolist(), strict=True):
        if m and start is None:
            start = t
        elif not m and start is not None:
            out.append((start, prev + step / 2))
            start = None
        prev = t
    if start is not None:
        out.append((start, prev + step / 2))
    return sorted(out, key=lambda w: w[0] - w[1])


def merge_intervals(spans: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """Overlapping (start, end) spans merged: one engine stall seen by many streams is one."""
    out: list[tuple[float, float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def slope(t: np.ndarray, y: np.ndarray) -> float:
    """Least-squares slope of Y over T (see the module docstring); 0 for fewer than 2 points."""
    if t.size < 2:
        return 0.0
    tc = t - t.mean()
    den = float(tc @ tc)
    return float((tc * (y - y.mean())).sum() / den) if den > 0 else 0.0


def in_flight(sends_s: np.ndarray, ends_s: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """Requests in flight at each of TS (SENDS and ENDS sorted, seconds)."""
    sent = np.searchsorted(sends_s, ts, "right")
    ended = np.searchsorted(ends_s, ts, "right")
    return (sent - ended).astype(float)


@dataclass(frozen=True)
class ServedVsSent:
    sent: int
    served: int

    @property
    def ratio(self) -> float:
        return self.served / self.sent if self.sent else math.nan

    @property
    def deficit_z(self) -> float:
        n = self.sent + self.served
        return (self.sent - self.served) / math.sqrt(n) if n else 0.0


def served_vs_sent(
    sends_s: np.ndarray, ends_s: np.ndarray, start_s: float, end_s: float
) -> ServedVsSent:
    """Requests sent and requests ended within [start_s, end_s]."""
    sent = int(np.count_nonzero((sends_s >= start_s) & (sends_s <= end_s)))
    served = int(np.count_nonzero((ends_s >= start_s) & (ends_s <= end_s)))
    return ServedVsSent(sent, served)


@dataclass(frozen=True)
class Prefill:
    """A request whose prefill ran in a stall (its first token ended the stalled step)."""

    request: int
    prompt_tokens: int
    first_token_s: float


@dataclass(frozen=True)
class Stall:
    """One engine stall: the streams that waited, and the prefills that ran meanwhile."""

    start_s: float
    end_s: float
    streams: tuple[int, ...]
    """Requests whose stream had a gap in this stall."""
    longest_gap_ms: float
    prefills: tuple[Prefill, ...]

    @property
    def duration_ms(self) -> float:
        return (self.end_s - self.start_s) * 1e3

    @property
    def culprit(self) -> Prefill | None:
        """The longest prompt prefilled in the stall."""
        return max(self.prefills, key=lambda p: p.prompt_tokens, default=None)


def stream_stalls(
    records: Sequence[RequestRecord], limit_ms: float, tolerance_s: float
) -> list[Stall]:
    """The stalls of LIMIT_MS or more in the successful streams, each with the requests whose
    prefill ran in it (first token within the stall or TOLERANCE_S of its end), in time order."""
    gaps: list[tuple[float, float, int, float]] = []
    for r in records:
        if not r.ok:
            continue
        for t_a, t_b in itertools.pairwise(r.chunk_ns):
            ms = (t_b - t_a) / 1e6
            if ms >= limit_ms:
                gaps.append((t_a / 1e9, t_b / 1e9, r.id, ms))
    if not gaps:
        return []
    firsts = sorted(
        (r.first_ns / 1e9, r.id, r.prompt_tokens or r.planned_input_len)
        for r in records
        if r.first_ns is not None
    )
    first_t = np.array([f[0] for f in firsts], dtype=float)
    out: list[Stall] = []
    for a, b in merge_intervals([(g[0], g[1]) for g in gaps]):
        inside = [g for g in gaps if g[0] >= a and g[1] <= b]
        lo = int(np.searchsorted(first_t, a, "left"))
        hi = int(np.searchsorted(first_t, b + tolerance_s, "right"))
        waited = {g[2] for g in inside}
        prefills = tuple(
            Prefill(request=rid, prompt_tokens=int(n), first_token_s=t)
            for t, rid, n in firsts[lo:hi]
            if rid not in waited or t > a
        )
        out.append(
            Stall(
                start_s=a,
                end_s=b,
                streams=tuple(sorted(waited)),
                longest_gap_ms=max(g[3] for g in inside),
                prefills=prefills,
            )
        )
    return out


def tail_ratio(p99: float | None, p50: float | None) -> float | None:
    """P99 / P50, or None when either is unknown or the median is 0."""
    if p99 is None or not p50:
        return None
    return p99 / p50
