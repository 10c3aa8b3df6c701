"""The knee method on synthetic curves with a known knee, and on curves without one."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import brentq
from sweep_rows import make_rows as rows_of

from servetune.sweep.knee import find_knee as _find_knee
from servetune.sweep.knee_metric import DEFAULT_K
from servetune.sweep.points import pav_increasing

MU = 10.0  # service rate of the M/M/1 curves (req/s)


def find_knee(*args, **kw):  # type: ignore[no-untyped-def]
    """These known-answer tests are written for k = 1 (Kleinrock's power, M/M/1 at ρ = ½)."""
    kw.setdefault("k", 1.0)
    return _find_knee(*args, **kw)


def mm1_ms(lam: np.ndarray, mu: float = MU, fixed_ms: float = 0.0) -> np.ndarray:
    return fixed_ms + 1000.0 / (mu - lam)


def elasticity_one(mu: float, fixed_ms: float) -> float:
    """Where d ln L / d ln λ = 1 for L = D + 1/(μ − λ): the true knee of the method."""

    def e(lam: float) -> float:
        q = 1000.0 / (mu - lam)
        return lam * q / (mu - lam) / (fixed_ms + q) - 1.0

    return float(brentq(e, 1e-6, mu - 1e-6))


def test_pav_is_monotone_least_squares() -> None:
    assert pav_increasing([1, 3, 2, 4]).tolist() == [1, 2.5, 2.5, 4]
    assert pav_increasing([5, 4, 3]).tolist() == [4, 4, 4]
    assert pav_increasing([1, 2, 3]).tolist() == [1, 2, 3]


def test_mm1_knee_is_at_half_capacity() -> None:
    lam = MU * np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95])
    knee = find_knee(rows_of(lam, lam, mm1_ms(lam)), "rate")
    assert knee.status == "found"
    assert knee.binding_metric == "ttft"
    assert knee.throughput == pytest.approx(MU / 2, rel=0.05)
    assert knee.offered == pytest.approx(MU / 2, rel=0.05)
    assert knee.confidence == "high"
    assert knee.bracket == ("rate-5", "rate-6")
    assert "TTFT" in knee.verdict and "req/s" in knee.verdict


def test_mm1_with_fixed_latency_matches_the_analytic_knee() -> None:
    fixed = 400.0
    truth = elasticity_one(MU, fixed)
    lam = MU * np.array([0.1, 0.25, 0.4, 0.55, 0.65, 0.75, 0.85, 0.9, 0.95, 0.98])
    knee = find_knee(rows_of(lam, lam, mm1_ms(lam, fixed_ms=fixed)), "rate")
    assert knee.status == "found"
    assert truth > MU / 2  # the fixed part moves the knee up
    assert knee.throughput == pytest.approx(truth, rel=0.08)


def test_hockey_stick_on_the_seeds_rates() -> None:
    rates = np.array([8, 16, 32, 64, 128.0])
    cap = 40.0
    x = np.minimum(rates, cap) * np.array([0.98, 0.98, 0.98, 0.99, 0.985])
    ttft = np.where(rates < cap, 150 + rates, 150 + (rates - cap) * 400)
    knee = find_knee(rows_of(rates, x, ttft), "rate")
    assert knee.status == "found"
    assert knee.bracket == ("rate-32", "rate-64")
    assert knee.last_comfortable_level == "rate-32"
    assert 31 <= (knee.throughput or 0) <= cap
    # 2× between bracketing levels: not pinned down, and the next rates go in between.
    assert knee.confidence == "medium"
    assert knee.suggested_loads and all(32 < r < 64 for r in knee.suggested_loads)
    assert any("saturated" in e for e in knee.evidence)


def test_noisy_mm1_knees_stay_near_the_truth() -> None:
    # M/M/1's bend is gentle (elasticity 0.5 at ρ = 1/3, 2 at ρ = 2/3), so 5% noise on each
    # P99 moves the estimate; it must stay unbiased and within ±35% in every draw.
    lam = MU * np.linspace(0.1, 0.95, 12)
    errors = []
    for seed in range(40):
        rng = np.random.default_rng(seed)
        x = lam * rng.normal(1.0, 0.02, lam.size)
        ttft = mm1_ms(lam) * rng.lognormal(0.0, 0.05, lam.size)
        knee = find_knee(rows_of(lam, x, ttft), "rate")
        assert knee.status == "found", seed
        errors.append((knee.throughput or 0) / (MU / 2) - 1)
    assert max(abs(e) for e in errors) < 0.35
    assert abs(float(np.median(errors))) < 0.08


def test_noisy_hockey_stick_is_located_tightly() -> None:
    # A sharp knee (many batch slots: flat, then a wall at capacity) is easy even with noise.
    cap = 40.0
    rates = np.linspace(4, 60, 15)
    for seed in range(20):
        rng = np.random.default_rng(seed)
        x = np.minimum(rates, cap) * rng.normal(0.98, 0.01, rates.size)
        ttft = np.where(rates <= cap, 200.0, 200 + (rates - cap) * 500)
        ttft = ttft * rng.lognormal(0.0, 0.08, rates.size)
        knee = find_knee(rows_of(rates, x, ttft), "rate")
        assert knee.status == "found", seed
        assert 0.85 * cap <= (knee.throughput or 0) <= 1.02 * cap, seed


def test_throughput_plateau_with_rising_latency_is_saturated_at_once() -> None:
    rates = np.array([8, 16, 32, 64, 128.0])
    x = np.array([20.1, 20.3, 20.0, 20.2, 19.8])
    ttft = np.array([3000, 9000, 20000, 40000, 60000.0])
    knee = find_knee(rows_of(rates, x, ttft), "rate")
    assert knee.status == "below_range"
    assert knee.throughput is None
    assert "already saturated at the lowest level" in knee.verdict
    assert knee.suggested_loads and min(knee.suggested_loads) < 8
    assert max(knee.suggested_loads) == pytest.approx(1.2 * 20.3, rel=0.02)


def test_flat_throughput_over_a_doubling_load_is_saturation() -> None:
    # Fixed-size levels cannot grow their queue forever: latency may rise only a little.
    rates = np.array([40, 80, 160.0])
    x = np.array([11.2, 11.3, 11.5])
    knee = find_knee(rows_of(rates, x, np.array([6480, 8250, 9150.0])), "rate")
    assert knee.status == "below_range"
    # Two levels close together with flat latency say nothing either way.
    knee = find_knee(rows_of([40, 44, 48], [11.2, 11.3, 11.5], [6480, 6500, 6600]), "rate")
    assert knee.status == "no_clear_knee"


def test_first_level_already_past_the_knee() -> None:
    # M/M/1 from ρ = 0.7 up: the slope exceeds k at the first level.
    lam = MU * np.array([0.7, 0.8, 0.9, 0.95])
    knee = find_knee(rows_of(lam, lam, mm1_ms(lam)), "rate")
    assert knee.status == "below_range"


def test_flat_curve_never_saturates() -> None:
    rates = np.array([8, 16, 32, 64, 128.0])
    knee = find_knee(rows_of(rates, rates * 0.99, np.full(5, 120.0)), "rate")
    assert knee.status == "above_range"
    assert "never saturated" in knee.verdict
    assert knee.suggested_loads == [192, 256, 384, 512]


def test_flat_noisy_dense_curve_finds_no_knee() -> None:
    rng = np.random.default_rng(3)
    rates = np.linspace(2, 40, 20)
    ttft = 120 * rng.lognormal(0, 0.1, rates.size)
    knee = find_knee(rows_of(rates, rates, ttft), "rate")
    assert knee.status == "above_range"


def test_gentle_power_law_is_not_a_knee() -> None:
    # TPOT growing as √X (memory-bound decode batching) is a slope, not a knee.
    rates = np.array([1, 2, 4, 8, 16, 32.0])
    knee = find_knee(rows_of(rates, rates, 50 * np.sqrt(rates)), "rate")
    assert knee.status == "above_range"


def test_plateau_without_latency_rise_is_no_clear_knee() -> None:
    rates = np.array([4, 8, 16, 32, 64.0])
    x = np.array([4, 8, 15.9, 16.1, 16.0])
    knee = find_knee(rows_of(rates, x, np.array([100, 101, 104, 110, 112.0])), "rate")
    assert knee.status == "no_clear_knee"
    assert knee.suggested_loads


def test_concurrency_sweep_closed_loop() -> None:
    # Closed loop with c servers of service time d: X = min(N/d, c/d), L = max(d, N·d/c).
    d_s, c = 2.0, 24
    conc = np.array([1, 2, 4, 8, 16, 32, 64, 128.0])
    x = np.minimum(conc, c) / d_s
    e2e = np.maximum(d_s, conc * d_s / c) * 1000 * (1 + 0.1 * np.minimum(conc, c) / c)
    knee = find_knee(
        rows_of(conc, x, e2el=e2e, mean_e2e=e2e * 0.8, mode="concurrency"), "concurrency"
    )
    assert knee.status == "found"
    assert knee.binding_metric == "e2el"
    assert 16 <= (knee.offered or 0) <= 32
    assert knee.bracket == ("conc-16", "conc-32")
    assert "concurrency" in knee.verdict
    assert all(16 < v < 32 and v == int(v) for v in knee.suggested_loads)


def test_p99_growing_with_throughput_from_the_start_is_no_knee() -> None:
    # A closed loop's start-up burst: P99 TTFT ∝ concurrency while throughput grows slower
    # (the offline simulator's numbers). E2E has the real knee; TTFT must not claim one.
    conc = np.array([1, 4, 16, 32, 64, 128, 256.0])
    x = np.array([0.593, 2.2, 7.01, 10.66, 14.31, 17.08, 18.38])
    ttft = np.array([39.3, 155, 620, 1241, 2487, 5008, 10819.0])
    e2e = np.array([1687, 1817, 2725, 3985, 6538, 11743, 20029.0])
    knee = find_knee(rows_of(conc, x, ttft, e2el=e2e, mode="concurrency"), "concurrency")
    per = {mk.metric: mk for mk in knee.per_metric}
    assert per["ttft"].status == "below_range"
    assert any("no flat part" in e for e in per["ttft"].evidence)
    assert knee.status == "found" and knee.binding_metric == "e2el"
    assert 16 <= (knee.offered or 0) <= 32


def test_a_thin_flat_part_still_counts() -> None:
    # M/M/1 swept from ρ = 0.3: only a little below the knee at ρ = ½, but it is there.
    lam = MU * np.array([0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95])
    knee = find_knee(rows_of(lam, lam, mm1_ms(lam)), "rate")
    assert knee.status == "found"
    assert knee.throughput == pytest.approx(MU / 2, rel=0.1)


def test_littles_law_and_its_cross_checks() -> None:
    lam = MU * np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95])
    e2e = mm1_ms(lam, fixed_ms=2000)
    running = lam * e2e / 1000  # what a server that runs everything at once would report
    knee = find_knee(
        rows_of(lam, lam, mm1_ms(lam), e2el=e2e, mean_e2e=e2e, running=running), "rate"
    )
    assert knee.concurrency == pytest.approx(knee.throughput * e2e[4] / 1000, rel=0.1)
    assert knee.concurrency_server == pytest.approx(knee.concurrency, rel=0.05)
    assert any("Little's law" in e and "server mean running" in e for e in knee.evidence)


def test_too_few_levels() -> None:
    knee = find_knee(rows_of([8, 16], [8, 16], [100, 200]), "rate")
    assert knee.status == "insufficient"
    assert "at least 3" in knee.verdict


def test_levels_without_completed_requests_are_left_out() -> None:
    lam = MU * np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95])
    rows = rows_of(lam, lam, mm1_ms(lam))
    rows[3].completed = 0
    rows[3].request_throughput = 0.0
    knee = find_knee(rows, "rate")
    assert knee.status == "found"
    assert knee.throughput == pytest.approx(MU / 2, rel=0.1)


def test_unbounded_probe_level_is_the_wall() -> None:
    rates = np.array([4, 8, 12, 16, math.inf])
    x = np.array([4, 8, 12, 15.5, 16.0])
    ttft = np.array([100, 102, 110, 300, 30000.0])
    knee = find_knee(rows_of(rates, x, ttft), "rate")
    assert knee.status == "found"
    assert 12 <= (knee.throughput or 0) <= 16
    assert math.isfinite(knee.offered or math.inf)


def test_confidence_grades() -> None:
    # Dense levels with clear intervals: high. One level below the knee: low.
    lam = MU * np.linspace(0.1, 0.95, 15)
    dense = find_knee(rows_of(lam, lam, mm1_ms(lam), ci=0.03), "rate")
    assert dense.confidence == "high"
    lam2 = MU * np.array([0.35, 0.6, 0.8, 0.9, 0.95])
    sparse = find_knee(rows_of(lam2, lam2, mm1_ms(lam2)), "rate")
    assert sparse.status == "found" and sparse.confidence == "low"
    assert any("1 level(s) below" in r for r in sparse.confidence_reasons)
    # Wide intervals at every level: the rise may be noise.
    noisy = find_knee(rows_of(lam, lam, mm1_ms(lam), ci=0.95), "rate")
    assert noisy.confidence == "low"


def test_repeated_levels_give_run_to_run_spread() -> None:
    lam = MU * np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95])
    rows = rows_of(lam, lam, mm1_ms(lam)) + rows_of(lam, lam, mm1_ms(lam) * 1.6)
    knee = find_knee(rows, "rate")
    assert knee.status == "found"
    assert knee.confidence == "low"
    assert any("run-to-run spread" in r for r in knee.confidence_reasons)


def test_default_k_puts_the_mm1_knee_at_two_thirds_of_capacity() -> None:
    """The default (k = 2): d ln P99 / d ln X = 2 ⇔ ρ = 2/3 for M/M/1 — the point where one
    more percent of throughput costs two percent of latency."""
    assert DEFAULT_K == 2.0
    lam = np.linspace(0.5, 9.8, 16)
    knee = _find_knee(rows_of(lam, lam, mm1_ms(lam)), "rate")
    assert knee.status == "found"
    assert knee.throughput == pytest.approx(MU * 2 / 3, rel=0.05)
