"""The comparisons and the verdict on known numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from servetune.quality.compare import compare_greedy, compare_scored, kl_topk
from servetune.quality.endpoint import Generated, Position, Scored, _parse_logprobs
from servetune.quality.verdict import MetricResult, judge, overall, paired_metric


def _dist(probs: dict[int, float]) -> dict[int, float]:
    return {k: math.log(v) for k, v in probs.items()}


def test_kl_exact_when_the_lists_cover_the_distribution() -> None:
    p = {0: 0.5, 1: 0.3, 2: 0.2}
    q = {0: 0.4, 1: 0.4, 2: 0.2}
    exact = sum(p[i] * math.log(p[i] / q[i]) for i in p)
    assert kl_topk(_dist(p), _dist(q)) == pytest.approx(exact)
    assert kl_topk(_dist(p), _dist(p)) == pytest.approx(0.0)


def test_kl_of_truncated_lists_is_a_lower_bound() -> None:
    p = {0: 0.5, 1: 0.2, 2: 0.2, 3: 0.1}
    q = {0: 0.3, 1: 0.3, 2: 0.1, 3: 0.3}
    full = sum(p[i] * math.log(p[i] / q[i]) for i in p)
    top2p = {0: p[0], 1: p[1]}
    top2q = {0: q[0], 1: q[1]}
    lb = kl_topk(_dist(top2p), _dist(top2q))
    assert lb is not None and 0 < lb <= full


def test_compare_scored_nll_kl_top1() -> None:
    a = Scored(
        [1, 2, 3],
        [
            Position(2, math.log(0.5), _dist({2: 0.5, 9: 0.3})),
            Position(3, math.log(0.25), _dist({3: 0.25, 4: 0.5})),
        ],
    )
    b = Scored(
        [1, 2, 3],
        [
            Position(2, math.log(0.3), _dist({2: 0.3, 9: 0.5})),
            Position(3, math.log(0.25), _dist({3: 0.25, 4: 0.5})),
        ],
    )
    s = compare_scored(a, b)
    assert s.aligned and s.tokens == 2
    assert s.nll_a == pytest.approx(-math.log(0.5) - math.log(0.25))
    assert s.nll_b == pytest.approx(-math.log(0.3) - math.log(0.25))
    assert s.top1_n == 2 and s.top1_same == 1  # position 1: 2 vs 9
    assert s.kl_n == 2 and s.kl_sum > 0
    other = Scored([1, 5, 3], b.positions)
    assert not compare_scored(a, other).aligned


def test_greedy_agreement() -> None:
    g = compare_greedy(Generated("x", [1, 2, 3, 4]), Generated("y", [1, 2, 9, 4]))
    assert (
        not g.exact and g.prefix_share == pytest.approx(0.5) and g.token_f1 == pytest.approx(0.75)
    )
    assert compare_greedy(Generated("a", [1]), Generated("a", [1])).exact


def test_both_logprob_formats_parse() -> None:
    legacy = {
        "tokens": ["The", " cat"],
        "token_logprobs": [None, -1.5],
        "top_logprobs": [None, {" cat": -1.5, " dog": -2.0}],
    }
    pos = _parse_logprobs(legacy)
    assert pos[0].logprob is None and pos[1].top == {" cat": -1.5, " dog": -2.0}
    content = {
        "content": [
            {
                "id": 7,
                "token": "x",
                "logprob": -0.1,
                "top_logprobs": [{"id": 7, "logprob": -0.1}, {"id": 8, "logprob": -3}],
            }
        ]
    }
    (p,) = _parse_logprobs(content)
    assert p.token == 7 and p.top == {7: -0.1, 8: -3.0}


def test_verdict_rules() -> None:
    assert judge((0.0, 0.005), 0.01) == "pass"
    assert judge((0.02, 0.05), 0.01) == "fail"
    assert judge((0.005, 0.02), 0.01) == "inconclusive"
    # identical candidate and floor: zero excess, a pass
    m = paired_metric("kl", "KL", "nats", [0.0] * 5, [0.0] * 5, [10] * 5, 0.01)
    assert m.status == "pass" and m.excess == 0
    # a clear excess over a zero floor: a fail
    m = paired_metric("kl", "KL", "nats", [1.0] * 8, [0.0] * 8, [10] * 8, 0.01)
    assert m.status == "fail" and m.excess == pytest.approx(0.1)
    # the floor is subtracted: a noisy baseline excuses the same loss
    m = paired_metric("kl", "KL", "nats", [1.0] * 8, [1.0] * 8, [10] * 8, 0.01)
    assert m.status == "pass"
    v, _ = overall([m, MetricResult(name="perplexity", label="p", unit="share", status="pass")])
    assert v == "pass"
    v, why = overall(
        [
            MetricResult(
                name="perplexity", label="p", unit="share", status="not_run", why="no logprobs"
            )
        ]
    )
    assert v == "inconclusive" and "no logprobs" in why


def test_the_95_interval_holds_95_percent_with_few_texts() -> None:
    # Texts whose true excess is 0 (each text's tokens add noise): the 95% interval must miss 0
    # about 5% of the time at every sample size. The percentile bootstrap used before missed it
    # in half the draws with 2 texts (its interval was the two texts' range), 25% with 3.
    rng = np.random.default_rng(2)
    for n in (2, 3, 6):
        misses = 0
        draws = 400
        for _ in range(draws):
            w = rng.integers(50, 200, n).astype(float)
            d = rng.normal(0.0, 1.0, n) * np.sqrt(w)
            m = paired_metric("kl", "KL", "nats", d, np.zeros(n), w, 10.0)
            assert m.ci95 is not None
            misses += not m.ci95[0] <= 0.0 <= m.ci95[1]
        assert misses / draws < 0.09, (n, misses / draws)


def test_two_texts_do_not_make_a_verdict_alone() -> None:
    # two texts, 0.015 and 0.040 nats of KL beyond the floor (threshold 0.01): both above it,
    # but two draws this far apart cannot place the mean past it at 95% — inconclusive, not
    # fail (the bootstrap's interval was the two texts' range, 0.015 … 0.040: a fail)
    m = paired_metric("kl", "KL", "nats", [1.5, 4.0], [0.0, 0.0], [100, 100], 0.01)
    assert m.status == "inconclusive", m
    # the same texts six times over are a fail
    m = paired_metric("kl", "KL", "nats", [1.5, 4.0] * 6, [0.0] * 12, [100] * 12, 0.01)
    assert m.status == "fail", m


def test_a_share_interval_stays_between_minus_one_and_one() -> None:
    # 5 of 8 greedy outputs differ, none on the floor: the t interval's upper end would be past
    # 100% (a share cannot be)
    m = paired_metric(
        "greedy", "g", "share", [1, 1, 1, 1, 1, 0, 0, 0], [0] * 8, [1] * 8, 1.0, bounds=(-1, 1)
    )
    assert m.ci95 is not None and -1.0 <= m.ci95[0] <= m.ci95[1] <= 1.0
    assert m.ci95[1] == 1.0


def test_samples_the_baseline_fails_cannot_pass_the_candidate() -> None:
    from servetune.quality.run import _samples_metric
    from servetune.quality.verdict import Thresholds
    from servetune.results.quality_file import SampleResult

    def r(outcome: str, base: bool) -> SampleResult:
        return SampleResult(
            name="s",
            check="exact",
            baseline=base,
            baseline_again=base,
            candidate=False,
            outcome=outcome,  # type: ignore[arg-type]
        )

    # every sample fails on the baseline too: no regression is possible, nothing was checked
    m = _samples_metric([r("fails_both", False)] * 4, Thresholds())
    assert m.status == "inconclusive" and "passes none" in (m.why or "")
    # one the baseline passes and the candidate keeps: a pass
    m = _samples_metric([r("fails_both", False)] * 3 + [r("ok", True)], Thresholds())
    assert m.status == "pass"
