"""The SLO form of the knee: the highest load whose P99s meet every SLO."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sweep_rows import make_rows

from servetune.results.schema import BenchConfig, Slo
from servetune.results.sweep_schema import SweepConfig, SweepResult
from servetune.sweep.analysis import analyse
from servetune.sweep.slo import find_slo_max

MU = 10.0
LAM = np.array([1, 2, 3, 4, 5, 6, 7, 8.5, 9, 9.5])


def mm1(lam: np.ndarray) -> np.ndarray:
    return 1000.0 / (MU - lam)


def test_interpolated_crossing_of_one_slo() -> None:
    sm = find_slo_max(make_rows(LAM, LAM, mm1(LAM)), Slo(ttft=500), "rate")
    assert sm is not None and sm.status == "found"
    assert sm.offered == pytest.approx(8.0, rel=0.03)  # 1000/(10 − λ) = 500 at λ = 8
    assert sm.interpolated and sm.limiting_metric == "ttft"
    assert sm.bracket == ("rate-7", "rate-8.5")
    assert sm.throughput == pytest.approx(8.0, rel=0.03)
    assert "P99 TTFT ≤ 500 ms" in sm.verdict and "limited by P99 TTFT" in sm.verdict


def test_the_tighter_slo_limits() -> None:
    e2e = 2000 + 300 * LAM  # crosses 3500 ms at λ = 5
    rows = make_rows(LAM, LAM, mm1(LAM), e2el=e2e)
    sm = find_slo_max(rows, Slo(ttft=500, e2el=3500), "rate")
    assert sm is not None and sm.limiting_metric == "e2el"
    assert sm.offered == pytest.approx(5.0, rel=0.03)


def test_all_levels_meet() -> None:
    sm = find_slo_max(make_rows(LAM, LAM, mm1(LAM)), Slo(ttft=5000), "rate")
    assert sm is not None and sm.status == "all_meet"
    assert sm.suggested_loads == [14.2, 19, 28.5, 38]
    assert "higher than the sweep reached" in sm.verdict


def test_no_level_meets() -> None:
    sm = find_slo_max(make_rows(LAM, LAM, mm1(LAM)), Slo(ttft=50), "rate")
    assert sm is not None and sm.status == "none_meet"
    assert sm.suggested_loads and max(sm.suggested_loads) < 1
    assert "not even the lowest" in sm.verdict


def test_no_slo_no_answer() -> None:
    assert find_slo_max(make_rows(LAM, LAM, mm1(LAM)), Slo(), "rate") is None


def test_noise_after_the_crossing_does_not_reopen_it() -> None:
    ttft = np.array([100, 110, 120, 600, 480, 700, 900.0])
    rows = make_rows([1, 2, 3, 4, 5, 6, 7], [1, 2, 3, 4, 5, 6, 7], ttft)
    sm = find_slo_max(rows, Slo(ttft=500), "rate")
    assert sm is not None and sm.status == "found"
    assert 3 < (sm.offered or 0) < 4


def test_unbounded_next_level_is_not_interpolated() -> None:
    rows = make_rows([4, 8, math.inf], [4, 8, 9], [100, 200, 9000])
    sm = find_slo_max(rows, Slo(ttft=500), "rate")
    assert sm is not None and sm.offered == 8 and not sm.interpolated


def test_concurrency_is_rounded_down() -> None:
    conc = np.array([1, 2, 4, 8, 16, 32.0])
    e2e = np.array([2000, 2050, 2100, 2300, 4000, 8000.0])
    sm = find_slo_max(
        make_rows(conc, conc / 2, e2el=e2e, mode="concurrency"), Slo(e2el=3000), "concurrency"
    )
    assert sm is not None and sm.status == "found"
    assert sm.offered is not None and sm.offered == int(sm.offered) and 8 <= sm.offered < 16
    assert "concurrency" in sm.verdict


def test_missing_metric_is_insufficient() -> None:
    rows = make_rows(LAM, LAM, mm1(LAM))
    for r in rows:
        r.tpot_p99 = None
    sm = find_slo_max(rows, Slo(tpot=50), "rate")
    assert sm is not None and sm.status == "insufficient"


def _sweep(rows: list, slo: Slo) -> SweepResult:  # type: ignore[type-arg]
    cfg = SweepConfig(bench=BenchConfig(goodput=slo), request_rates=list(LAM))
    return SweepResult(created_at="t", updated_at="t", config=cfg, rows=rows)


def test_confirmation_level_that_meets() -> None:
    rows = make_rows(LAM, LAM, mm1(LAM))
    confirm = make_rows([7.9], [7.9], [470.0])[0]
    confirm.role, confirm.label = "confirm", "confirm-rate-7.9"
    result = _sweep([*rows, confirm], Slo(ttft=500))
    analyse(result)
    sm = result.slo_max
    assert sm is not None and sm.confirmed is True and sm.confirm_label == "confirm-rate-7.9"
    assert sm.offered == pytest.approx(8.0, rel=0.03)  # the main levels' answer stands
    assert "confirmed by one more level" in sm.verdict


def test_confirmation_level_that_misses_moves_the_answer_down() -> None:
    rows = make_rows(LAM, LAM, mm1(LAM))
    confirm = make_rows([7.9], [7.9], [650.0])[0]
    confirm.role, confirm.label = "confirm", "confirm-rate-7.9"
    result = _sweep([*rows, confirm], Slo(ttft=500))
    analyse(result)
    sm = result.slo_max
    assert sm is not None and sm.confirmed is False
    assert (sm.offered or 0) < 7.9
    assert sm.bracket == ("rate-7", "confirm-rate-7.9")
    assert any(e.startswith("not confirmed") for e in sm.evidence)


def test_only_the_probe_so_far() -> None:
    # After an auto sweep's probe, the one row has an unbounded rate: suggestions stay finite.
    rows = make_rows([math.inf], [10.8], [34000.0])
    sm = find_slo_max(rows, Slo(ttft=1000), "rate")
    assert sm is not None and sm.status == "none_meet"
    assert sm.suggested_loads and all(math.isfinite(v) for v in sm.suggested_loads)
    assert max(sm.suggested_loads) < 10.8
