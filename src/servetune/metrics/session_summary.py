"""What the records say of the prefix cache and of sessions (docs/metrics.md, "Sessions and the
prefix cache").

- The client-seen hit rate: Σ ``cached_tokens`` / Σ ``prompt_tokens`` over the successful
  requests in the window whose answer said how many prompt tokens came from the cache
  (``usage.prompt_tokens_details.cached_tokens``); the server's own counters (prefix cache
  queries and hits in ``/metrics``) are in ``run.json``'s ``server``, the workload's implied
  rate in ``workload``.
- By turn index: TTFT and TPOT percentiles of a session's first turns, of its later turns and
  of each turn index (the last row pools the deep turns); by session: the distribution over
  sessions of each session's mean TTFT and TPOT.
- How sessions ended: all planned turns succeeded, or ended early (a turn failed, the context
  cap ended it, the run ended).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from servetune.results.conversation import CacheFigures, SessionFigures, TurnFigures
from servetune.results.record import RequestRecord

DEEPEST_TURN_ROW = 8
"""Turns from this index on are pooled in one row of ``by_turn``."""


def _prompt(r: RequestRecord) -> int:
    return r.prompt_tokens if r.prompt_tokens is not None else r.planned_input_len


def _rate(rs: Sequence[RequestRecord]) -> float | None:
    told = [r for r in rs if r.cached_tokens is not None]
    total = sum(_prompt(r) for r in told)
    if not told or total <= 0:
        return None
    return sum(r.cached_tokens or 0 for r in told) / total


def cache_figures(ok: Sequence[RequestRecord]) -> CacheFigures | None:
    """The client-seen prefix-cache figures of the successful requests, None when no answer
    said how many prompt tokens came from the cache."""
    told = [r for r in ok if r.cached_tokens is not None]
    if not told:
        return None
    later = [r for r in told if (r.turn or 1) > 1]
    return CacheFigures(
        requests_reporting=len(told),
        requests=len(ok),
        prompt_tokens=sum(_prompt(r) for r in told),
        cached_tokens=sum(r.cached_tokens or 0 for r in told),
        hit_rate=_rate(told),
        hit_rate_later_turns=_rate(later) if any(r.session for r in told) else None,
    )


def _pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def _turn_row(label: str, rs: Sequence[RequestRecord]) -> TurnFigures:
    ttft = [t for r in rs if (t := r.ttft_ms) is not None]
    tpot = [t for r in rs if (t := r.tpot_ms) is not None]
    return TurnFigures(
        turn=label,
        requests=len(rs),
        ttft_p50=_pct(ttft, 50),
        ttft_p99=_pct(ttft, 99),
        tpot_p50=_pct(tpot, 50),
        tpot_p99=_pct(tpot, 99),
        mean_prompt_tokens=float(np.mean([_prompt(r) for r in rs])) if rs else None,
        hit_rate=_rate(rs),
    )


def session_figures(
    records: Sequence[RequestRecord],
    inside: Sequence[RequestRecord],
    ok: Sequence[RequestRecord],
) -> SessionFigures | None:
    """Sessions of the run (``records``: all, ``inside``: those planned in the window,
    ``ok``: those that count in the summary); None when no record belongs to a session."""
    if not any(r.session is not None for r in inside):
        return None
    all_of: dict[str, list[RequestRecord]] = defaultdict(list)
    for r in records:
        if r.session is not None:
            all_of[r.session].append(r)
    in_window = {r.session for r in inside if r.session is not None}
    completed = 0
    for sid in in_window:
        rs = all_of[sid]
        planned = max((r.session_turns or 0) for r in rs)
        good = {r.turn for r in rs if r.ok}
        if planned and len(good) >= planned:
            completed += 1
    ok_s = [r for r in ok if r.session is not None]
    first = [r for r in ok_s if r.turn == 1]
    later = [r for r in ok_s if (r.turn or 1) > 1]
    by_idx: dict[int, list[RequestRecord]] = defaultdict(list)
    for r in ok_s:
        by_idx[min(r.turn or 1, DEEPEST_TURN_ROW)].append(r)
    rows = [
        _turn_row(f"≥{k}" if k == DEEPEST_TURN_ROW else str(k), by_idx[k]) for k in sorted(by_idx)
    ]
    per_ttft: dict[str, list[float]] = defaultdict(list)
    per_tpot: dict[str, list[float]] = defaultdict(list)
    for r in ok_s:
        assert r.session is not None
        if (t := r.ttft_ms) is not None:
            per_ttft[r.session].append(t)
        if (t := r.tpot_ms) is not None:
            per_tpot[r.session].append(t)
    m_ttft = [float(np.mean(v)) for v in per_ttft.values()]
    m_tpot = [float(np.mean(v)) for v in per_tpot.values()]
    sent = [len(all_of[sid]) for sid in in_window]
    return SessionFigures(
        sessions=len(in_window),
        completed=completed,
        ended_early=len(in_window) - completed,
        truncated_turns=sum(1 for r in ok_s if r.dropped_turns),
        mean_turns=float(np.mean(sent)) if sent else None,
        first_turn=_turn_row("1", first) if first else None,
        later_turns=_turn_row("≥2", later) if later else None,
        by_turn=rows,
        session_ttft_mean_p50=_pct(m_ttft, 50),
        session_ttft_mean_p99=_pct(m_ttft, 99),
        session_tpot_mean_p50=_pct(m_tpot, 50),
        session_tpot_mean_p99=_pct(m_tpot, 99),
    )
