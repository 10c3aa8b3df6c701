"""Timeline statistics: stretches, merged stalls, slopes, served/sent, and the stalls of the
streams with the prefills that ran in them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from servetune.metrics.timeline import (
    attribution_tolerance_s,
    in_flight,
    merge_intervals,
    served_vs_sent,
    slope,
    stall_limit_ms,
    stream_stalls,
    stretches,
    tail_ratio,
)
from servetune.results.record import RequestRecord

MS = 1_000_000


def test_stretches_and_merged_stalls() -> None:
    ts = np.arange(0.0, 5.0, 0.5)
    mask = np.array([0, 1, 1, 1, 0, 0, 1, 0, 1, 1], dtype=bool)
    got = stretches(ts, mask)
    assert got[0] == (0.5, 1.75)  # the longest first
    assert len(got) == 3
    assert merge_intervals([(1.0, 2.0), (1.5, 2.5), (3.0, 4.0), (1.2, 1.3)]) == [
        (1.0, 2.5),
        (3.0, 4.0),
    ]


def test_slope_in_flight_and_served_vs_sent() -> None:
    t = np.arange(0.0, 10.0, 0.5)
    assert slope(t, 3.0 * t + 1.0) == pytest.approx(3.0)
    assert slope(np.array([1.0]), np.array([2.0])) == 0.0
    sends = np.array([0.0, 1.0, 2.0, 3.0])
    ends = np.array([0.5, 2.5, 5.0, 6.0])
    assert list(in_flight(sends, ends, np.array([0.0, 1.0, 2.6, 7.0]))) == [1, 1, 1, 0]
    half = served_vs_sent(sends, ends, 1.0, 3.0)
    assert (half.sent, half.served) == (3, 1)
    assert half.ratio == pytest.approx(1 / 3)
    assert half.deficit_z == pytest.approx(2 / math.sqrt(4))


def test_thresholds() -> None:
    assert stall_limit_ms(12.0) == 250.0
    assert stall_limit_ms(40.0) == 400.0
    assert attribution_tolerance_s(5.0) == pytest.approx(0.03)
    assert tail_ratio(100.0, 20.0) == 5.0 and tail_ratio(1.0, 0.0) is None


def _rec(rid: int, send_ms: int, chunks_ms: list[int], prompt: int) -> RequestRecord:
    chunks = [c * MS for c in chunks_ms]
    return RequestRecord(
        id=rid,
        status="ok",
        scheduled_ns=send_ms * MS,
        eligible_ns=send_ms * MS,
        send_ns=send_ms * MS,
        first_ns=chunks[0],
        last_ns=chunks[-1],
        end_ns=chunks[-1],
        chunk_ns=chunks,
        planned_input_len=prompt,
        output_tokens=len(chunks),
    )


def test_a_stall_names_the_prefill_that_ran_in_it() -> None:
    # two streams decode every 20 ms; from 100 to 1300 ms they wait while request 2's long
    # prompt is prefilled (its first token comes out of the step that ends the stall)
    a = _rec(0, 0, [20, 40, 60, 80, 100, 1300, 1320], 100)
    b = _rec(1, 0, [30, 50, 70, 90, 110, 1300, 1320], 120)
    c = _rec(2, 90, [1300, 1320], 16000)
    stalls = stream_stalls([a, b, c], 250.0, 0.03)
    assert len(stalls) == 1
    s = stalls[0]
    assert s.streams == (0, 1)
    assert s.longest_gap_ms == pytest.approx(1200.0)
    assert s.culprit is not None and s.culprit.request == 2
    assert s.culprit.prompt_tokens == 16000
    # a pause with no prefill finishing is a stall with no culprit
    d = _rec(3, 0, [10, 20, 900, 910], 50)
    lone = stream_stalls([d], 250.0, 0.03)
    assert len(lone) == 1 and lone[0].culprit is None
