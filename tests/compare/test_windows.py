"""The windowed view of a run reproduces the run's own figures, and the resampling primitives
compute what they claim."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tests.compare.sim_runs import sim_run

from servetune.compare.blocklen import optimal_block_length
from servetune.compare.bootstrap import multiplicities, point_estimates, weighted_percentiles
from servetune.compare.figures import FIGURES
from servetune.compare.inputs import load_run
from servetune.compare.signflip import block_matrix, sign_patterns
from servetune.compare.windows import ValueSet, build_windows
from servetune.results.schema import Slo


@pytest.mark.parametrize(("warmup", "cooldown"), [(0.0, 0.0), (5.0, 3.0)])
def test_point_estimates_are_the_summary(tmp_path: Path, warmup: float, cooldown: float) -> None:
    slo = Slo(ttft=300, tpot=40)
    d = sim_run(
        tmp_path / "r", 6, 1, num_prompts=400, warmup_s=warmup, cooldown_s=cooldown, goodput=slo
    )
    run = load_run(d)
    s = run.result.summary
    w = build_windows(run.records, run.samples, warmup, cooldown, slo)
    est = point_estimates(w, list(FIGURES))
    for metric in ("ttft", "tpot", "itl", "e2el"):
        st = getattr(s, metric)
        assert est[f"p50_{metric}_ms"] == pytest.approx(st.p50, rel=1e-9)
        assert est[f"p90_{metric}_ms"] == pytest.approx(st.p90, rel=1e-9)
        assert est[f"p99_{metric}_ms"] == pytest.approx(st.p99, rel=1e-9)
        assert est[f"mean_{metric}_ms"] == pytest.approx(st.mean, rel=1e-9)
    assert est["request_throughput"] == pytest.approx(s.request_throughput, rel=1e-9)
    assert est["output_throughput"] == pytest.approx(s.output_throughput, rel=1e-9)
    assert est["total_token_throughput"] == pytest.approx(s.total_token_throughput, rel=1e-9)
    assert est["request_goodput"] == pytest.approx(s.request_goodput, rel=1e-9)
    assert est["failed"] == s.failed
    server = run.result.server.summary if run.result.server else {}
    assert 0.0 <= est["kv_cache_usage_mean"] <= 1.0
    assert est["running_mean"] == pytest.approx(server["running_mean"], rel=0.05)


def test_weighted_percentiles_equal_numpy_on_the_repeated_values() -> None:
    rng = np.random.default_rng(3)
    n_win = 30
    values = rng.lognormal(3, 1, 500)
    windows = rng.integers(0, n_win, 500)
    vs = ValueSet.build(values, windows)
    mult = multiplicities(n_win, 4, 50, rng)
    got = weighted_percentiles(vs, mult, [50.0, 90.0, 99.0])
    for i in range(50):
        expanded = np.repeat(values, mult[i][windows])
        want = np.percentile(expanded, [50.0, 90.0, 99.0])
        assert got[i] == pytest.approx(want, rel=1e-12)


def test_multiplicities_draw_every_window_once_on_average() -> None:
    m = multiplicities(40, 5, 2000, np.random.default_rng(0))
    assert (m.sum(axis=1) == 40).all()
    assert m.mean(axis=0) == pytest.approx(np.ones(40), abs=0.12)


def test_block_length_grows_with_dependence() -> None:
    rng = np.random.default_rng(1)
    white = rng.normal(size=2000)
    ar = np.zeros(2000)
    for t in range(1, 2000):
        ar[t] = 0.9 * ar[t - 1] + rng.normal()
    assert optimal_block_length(white) < 3
    assert optimal_block_length(ar) > 3 * optimal_block_length(white)


def test_sign_patterns_are_every_pattern_when_few_and_include_the_identity() -> None:
    few = sign_patterns(4, 1000, np.random.default_rng(0))
    assert few.shape == (16, 4) and len({tuple(r) for r in few}) == 16
    many = sign_patterns(30, 500, np.random.default_rng(0))
    assert many.shape == (500, 30) and (many[0] == 1).all()
    m = block_matrix(10, 3)
    assert m.shape == (4, 10) and (m.sum(axis=0) == 1).all()
