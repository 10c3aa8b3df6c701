"""The canary's sequential test on synthetic traffic whose truth is known."""

from __future__ import annotations

import math
import random

import pytest

from servetune.gateway.canary import Observation, StepAnalysis, half_width
from servetune.gateway.config import CanaryPolicy


def drive(
    ratio: float,
    seed: int,
    err_cand: float = 0.0,
    n_max: int = 20_000,
    *,
    sigma: float = 0.5,
    revert: bool = False,
    slow_share: float = 0.0,
    slow_factor: float = 5.0,
    **policy: object,
) -> tuple[str, int]:
    """Feed a 20 % canary until a decision; the load (shared by both arms) drifts over time,
    so requests close in time are alike: a random walk (bounded below), or with ``revert``
    one pulled back to its level. ``slow_share`` of the candidate's requests take
    ``slow_factor`` × as long (a tail-only regression, e.g. preemption). Returns (decision,
    requests seen)."""
    rng = random.Random(seed)
    a = StepAnalysis(CanaryPolicy(min_requests=100, min_batches=10, **policy), "cand", 0)  # type: ignore[arg-type]
    load = 1.0
    for i in range(n_max):
        if i % 50 == 0:  # slow minutes, fast minutes
            step = rng.gauss(0, 0.3)
            load = (
                math.exp(0.8 * math.log(load) + step) if revert else max(0.3, load * math.exp(step))
            )
        cand = i % 5 == 0
        scale = load * (ratio if cand else 1.0)
        if cand and rng.random() < slow_share:
            scale *= slow_factor
        ttft = 0.05 * scale * math.exp(rng.gauss(0, sigma))
        tpot = 0.02 * scale * math.exp(rng.gauss(0, 0.4 * sigma))
        e2e = ttft + 100 * tpot
        err = rng.random() < (err_cand if cand else 0.0)
        a.add(Observation("cand" if cand else "base", 0, ttft, tpot, e2e, err))
        if i % 25 == 0:
            decision, _reason, _ev = a.decide()
            if decision != "continue":
                return decision, i
    return "continue", n_max


def test_equal_candidate_is_promoted_and_rarely_rolled_back() -> None:
    outcomes = [drive(1.0, seed) for seed in range(40)]
    rollbacks = sum(d == "rollback" for d, _ in outcomes)
    promoted = sum(d == "promote" for d, _ in outcomes)
    assert rollbacks <= 2, outcomes  # alpha = 0.05 over the whole sequence
    assert promoted >= 36, outcomes


@pytest.mark.parametrize("sigma", [0.2, 1.0])
def test_equal_candidate_with_the_tail_judged_other_spreads(sigma: float) -> None:
    # fixed seeds; α = 0.05 over the sequence: 2 of 20 leaves a wide margin (0 of 200 seen,
    # docs/gateway.md)
    outcomes = [drive(1.0, seed, n_max=60_000, sigma=sigma, revert=True) for seed in range(20)]
    assert sum(d == "rollback" for d, _ in outcomes) <= 2, outcomes
    assert sum(d == "promote" for d, _ in outcomes) >= 18, outcomes


def test_a_candidate_worse_only_in_its_tail_is_rolled_back() -> None:
    # 5 % of the candidate's requests 5× slower (preemption under peaks): its geometric mean
    # is ×1.08, inside the ×1.10 tolerance, so the test of the means alone never rolls it
    # back; its P95 is far above 1.1 × the baseline's. Fixed seeds (0–9 all caught). Over 200
    # seeds: 200 caught with the load pulled back to its level (median 2,341 candidate
    # requests, max 7,806); 197 under the random walk (median 3,528, max 11,926; 3 promoted:
    # an excess of ~0.03 is near the 0.02 margin). The bound here is 12,000.
    for revert in (False, True):
        means_only = [
            drive(1.0, seed, n_max=15_000, revert=revert, slow_share=0.05, tail_quantile=None)
            for seed in range(3)
        ]
        assert all(d != "rollback" for d, _ in means_only), means_only
        judged = [
            drive(1.0, seed, n_max=60_000, revert=revert, slow_share=0.05) for seed in range(10)
        ]
        assert all(d == "rollback" for d, _ in judged), judged
    # a tenth of them 3× slower (×1.12 P95 and beyond, ×1.10 geometric mean): also caught
    judged = [drive(1.0, s, n_max=60_000, slow_share=0.1, slow_factor=3.0) for s in range(10)]
    assert all(d == "rollback" for d, _ in judged), judged


def test_slower_candidate_is_rolled_back_quickly() -> None:
    outcomes = [drive(1.5, seed) for seed in range(20)]
    assert all(d == "rollback" for d, _ in outcomes), outcomes
    assert max(n for _, n in outcomes) < 3000


def test_erroring_candidate_is_rolled_back() -> None:
    outcomes = [drive(1.0, seed, err_cand=0.2) for seed in range(10)]
    assert all(d == "rollback" for d, _ in outcomes), outcomes


def test_slightly_slower_within_tolerance_is_not_rolled_back() -> None:
    outcomes = [drive(1.03, seed) for seed in range(10)]
    assert sum(d == "rollback" for d, _ in outcomes) <= 1, outcomes


def test_no_decision_before_the_minimum_sample() -> None:
    a = StepAnalysis(CanaryPolicy(min_requests=100, min_batches=10), "cand", 0)
    for i in range(150):  # a huge difference, but only 30 candidate requests
        a.add(
            Observation(
                "cand" if i % 5 == 0 else "base", 0, 1.0 if i % 5 == 0 else 0.1, None, 1.0, False
            )
        )
    decision, reason, _ = a.decide()
    assert decision == "continue" and "minimum sample" in reason
    # an observation of another step is ignored
    a.add(Observation("cand", 1, 9.0, None, 9.0, True))
    assert a.cand.total == 30


def test_half_width_shrinks_with_information() -> None:
    assert half_width(0.0, 0.1, 0.01) == 0.0
    wide, narrow = half_width(0.01, 0.1, 0.0125), half_width(0.0001, 0.1, 0.0125)
    assert wide > narrow > 0


def _whole_answers(ratio: float, tpot_one_side: bool = False) -> tuple[str, str]:
    """Non-streamed traffic: TTFT and E2E measured, no TPOT (tokens came together)."""
    rng = random.Random(7)
    a = StepAnalysis(CanaryPolicy(min_requests=100, min_batches=10), "cand", 0)
    for i in range(20_000):
        cand = i % 5 == 0
        e2e = 0.5 * (ratio if cand else 1.0) * math.exp(rng.gauss(0, 0.3))
        tpot = 0.02 if (tpot_one_side and not cand) else None
        a.add(Observation("cand" if cand else "base", 0, e2e, tpot, e2e, False))
        if i % 25 == 0:
            decision, reason, _ev = a.decide()
            if decision != "continue":
                return decision, reason
    return "continue", ""


def test_a_latency_neither_group_had_does_not_hold_the_step() -> None:
    # TPOT used to be recorded for whole answers as the microseconds between two stamps in
    # the gateway; now it is not measured, and the step is decided on what was
    decision, reason = _whole_answers(1.0)
    assert decision == "promote" and "(tpot, tpot_tail: not measured)" in reason, reason
    assert _whole_answers(1.5)[0] == "rollback"
    # measured on one side only: nothing to compare it with, it does not pass by default
    assert _whole_answers(1.0, tpot_one_side=True)[0] == "continue"


def _early(cand_fail: float, base_fail: float, seed: int) -> tuple[str, str, int]:
    """Feed a 20 % canary whose requests fail at ``cand_fail`` until the minimum sample."""
    rng = random.Random(seed)
    a = StepAnalysis(CanaryPolicy(min_requests=100, min_batches=10), "cand", 0)
    for i in range(2_000):
        cand = i % 5 == 0
        err = rng.random() < (cand_fail if cand else base_fail)
        lat = None if err else 0.1 * math.exp(rng.gauss(0, 0.3))
        a.add(Observation("cand" if cand else "base", 0, lat, lat, lat, err))
        decision, reason, _ev = a.decide()
        if decision != "continue" or a.enough():
            return decision, reason, a.cand.total
    return "continue", "", a.cand.total


def test_a_plainly_failing_candidate_is_rolled_back_before_the_minimum_sample() -> None:
    decision, reason, n = _early(1.0, 0.0, 1)
    assert decision == "rollback" and reason.startswith("candidate failing") and n <= 10, reason
    decision, _reason, n = _early(0.5, 0.0, 2)
    assert decision == "rollback" and n < 100  # half its requests fail
    # equal error rates (both 2 %), many seeds: never rolled back early
    early = [_early(0.02, 0.02, s) for s in range(200)]
    assert not [e for e in early if e[0] == "rollback" and e[2] < 100]
